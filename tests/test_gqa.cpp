// Grouped-query and multi-query attention (K/V with fewer heads than Q) on every backend, against a float64
// formula on K/V repeated with repeat_interleave (the pairing of F.scaled_dot_product_attention's enable_gqa):
// forward and backward, every mask kind, causal in both alignments, and the errors for heads that do not divide.

#include "support.h"

#include <attn/ops/flash_attention.h>

#include <cmath>

namespace attn::test {
namespace {

struct GqaShape {
  int64_t batch, heads, kv_heads, tq, tk, dk, dv;
};

const std::vector<GqaShape> kGqaShapes = {
    {1, 4, 2, 1, 1, 8, 8},      // one query, one key
    {2, 6, 3, 17, 33, 16, 16},  // group of 2, odd lengths
    {1, 8, 1, 70, 70, 8, 12},   // multi-query (one K/V head), d_k != d_v
    {2, 4, 2, 300, 130, 32, 32},  // Tq > Tk, partial tiles on both axes
    {1, 9, 3, 5, 600, 16, 16},  // SmolLM2's 9 query heads over 3 K/V heads, several key blocks
};

enum class MaskKind { None, Padding, Attend, Additive, All };

struct Problem {
  torch::Tensor q, k, v;
  AttentionMasks masks;
  torch::Tensor allowed;  // [B|1, H|1, Tq, Tk] bool, built independently of the library
};

Problem make_problem(const GqaShape& s, MaskKind kind, bool causal, CausalAlignment alignment, uint64_t seed) {
  torch::manual_seed(seed);
  const auto f64 = torch::kFloat64;
  Problem p;
  p.q = torch::randn({s.batch, s.heads, s.tq, s.dk}, f64);
  p.k = torch::randn({s.batch, s.kv_heads, s.tk, s.dk}, f64);
  p.v = torch::randn({s.batch, s.kv_heads, s.tk, s.dv}, f64);
  p.allowed = torch::ones({s.batch, s.heads, s.tq, s.tk}, torch::kBool);
  if (kind == MaskKind::Padding || kind == MaskKind::All) {
    const torch::Tensor pad = torch::rand({s.batch, 1, s.tk}) < 0.3;
    p.masks.key_padding_mask(pad);
    p.allowed = p.allowed.logical_and(pad.logical_not().unsqueeze(-2));
  }
  if (kind == MaskKind::Attend || kind == MaskKind::All) {
    const torch::Tensor attend = torch::rand({s.tq, s.tk}) < 0.7;
    p.masks.attend_mask(attend);
    p.allowed = p.allowed.logical_and(attend);
  }
  if (kind == MaskKind::Additive || kind == MaskKind::All) {
    // Per query head, so a mix-up of heads within a group shows.
    const torch::Tensor blocked = torch::rand({s.batch, s.heads, s.tq, s.tk}) < 0.2;
    p.masks.additive_mask(torch::zeros({s.batch, s.heads, s.tq, s.tk}, f64).masked_fill(blocked, -INFINITY));
    p.allowed = p.allowed.logical_and(blocked.logical_not());
  }
  if (causal) {
    const int64_t offset = alignment == CausalAlignment::BottomRight ? s.tk - s.tq : 0;
    const torch::Tensor i = torch::arange(s.tq).unsqueeze(1), j = torch::arange(s.tk).unsqueeze(0);
    p.allowed = p.allowed.logical_and(j <= i + offset);
  }
  return p;
}

torch::Tensor repeat_heads(const torch::Tensor& t, int64_t group) { return t.repeat_interleave(group, 1); }

struct GqaParam {
  Backend backend;
  torch::Dtype dtype;
};

std::string gqa_param_name(const ::testing::TestParamInfo<GqaParam>& info) {
  return std::string(to_string(info.param.backend)) + "_" + c10::toString(info.param.dtype);
}

class GroupedQueryAttention : public ::testing::TestWithParam<GqaParam> {};

const struct {
  bool causal;
  CausalAlignment alignment;
  const char* name;
} kCausalKinds[] = {{false, CausalAlignment::BottomRight, "not causal"},
                    {true, CausalAlignment::BottomRight, "causal bottom-right"},
                    {true, CausalAlignment::TopLeft, "causal top-left"}};

TEST_P(GroupedQueryAttention, ForwardMatchesRepeatedHeadsInFloat64) {
  const Backend backend = GetParam().backend;
  const torch::Dtype dtype = GetParam().dtype;
  uint64_t seed = 40;
  for (const GqaShape& s : kGqaShapes) {
    for (MaskKind mk : {MaskKind::None, MaskKind::Padding, MaskKind::Attend, MaskKind::Additive, MaskKind::All}) {
      for (const auto& ck : kCausalKinds) {
        SCOPED_TRACE(::testing::Message() << "H=" << s.heads << " H_kv=" << s.kv_heads << " Tq=" << s.tq
                                          << " Tk=" << s.tk << " masks=" << static_cast<int>(mk) << ", " << ck.name);
        const Problem p = make_problem(s, mk, ck.causal, ck.alignment, ++seed);
        const int64_t group = s.heads / s.kv_heads;
        const torch::Tensor expected = std::get<0>(float64_attention(
            p.q, repeat_heads(p.k, group), repeat_heads(p.v, group), p.allowed, 1.0 / std::sqrt(double(s.dk))));
        AttentionMasks masks = p.masks;
        if (masks.additive_mask().defined()) masks.additive_mask(masks.additive_mask().to(dtype));
        const auto options =
            SdpaOptions().masks(masks).causal(ck.causal).causal_alignment(ck.alignment).backend(backend);
        const torch::Tensor actual =
            attn::scaled_dot_product_attention(p.q.to(dtype), p.k.to(dtype), p.v.to(dtype), options);
        ASSERT_EQ(actual.sizes(), expected.sizes());
        EXPECT_CLOSE(actual.to(torch::kFloat64), expected, tolerance(dtype));
      }
    }
  }
}

// dK and dV of a shared head are the sums over its group: against autograd through repeat_interleave on the
// float64 math path (which then sees equal head counts).
TEST_P(GroupedQueryAttention, BackwardSumsGradientsOverEachGroup) {
  const Backend backend = GetParam().backend;
  const torch::Dtype dtype = GetParam().dtype;
  const double tol = dtype == torch::kBFloat16 ? 1e-1 : tolerance(dtype) * 10;
  uint64_t seed = 90;
  for (const GqaShape& s : kGqaShapes) {
    for (MaskKind mk : {MaskKind::None, MaskKind::All}) {
      for (const auto& ck : kCausalKinds) {
        SCOPED_TRACE(::testing::Message() << "H=" << s.heads << " H_kv=" << s.kv_heads << " Tq=" << s.tq
                                          << " Tk=" << s.tk << " masks=" << static_cast<int>(mk) << ", " << ck.name);
        const Problem p = make_problem(s, mk, ck.causal, ck.alignment, ++seed);
        // Backend::Torch documents NaN gradients for rows with no allowed key (LibTorch's own semantics).
        if (backend == Backend::Torch && !p.allowed.any(-1).all().item<bool>()) continue;
        const int64_t group = s.heads / s.kv_heads;
        const torch::Tensor cotangent = torch::randn({s.batch, s.heads, s.tq, s.dv}, torch::kFloat64);
        const auto grads = [&](torch::Dtype dt, Backend b, bool repeat) {
          const auto leaf = [&](const torch::Tensor& t) { return t.to(dt).clone().requires_grad_(); };
          torch::Tensor q = leaf(p.q), k = leaf(p.k), v = leaf(p.v);
          AttentionMasks masks = p.masks;
          if (masks.additive_mask().defined()) masks.additive_mask(masks.additive_mask().to(dt));
          const auto options = SdpaOptions().masks(masks).causal(ck.causal).causal_alignment(ck.alignment).backend(b);
          const torch::Tensor out = repeat ? attn::scaled_dot_product_attention(q, repeat_heads(k, group),
                                                                          repeat_heads(v, group), options)
                                           : attn::scaled_dot_product_attention(q, k, v, options);
          (out * cotangent.to(dt)).sum().backward();
          return std::vector<torch::Tensor>{q.grad().to(torch::kFloat64), k.grad().to(torch::kFloat64),
                                            v.grad().to(torch::kFloat64)};
        };
        const auto expected = grads(torch::kFloat64, Backend::Math, /*repeat=*/true);
        const auto actual = grads(dtype, backend, /*repeat=*/false);
        const char* names[] = {"d query", "d key", "d value"};
        for (int i = 0; i < 3; ++i) {
          SCOPED_TRACE(names[i]);
          ASSERT_EQ(actual[i].sizes(), expected[i].sizes());
          EXPECT_TRUE(torch::allclose(actual[i], expected[i], tol, tol))
              << "max |actual - expected| = " << (actual[i] - expected[i]).abs().max().item<double>();
        }
      }
    }
  }
}

std::vector<GqaParam> gqa_grid() {
  std::vector<GqaParam> grid;
  for (Backend b : {Backend::Math, Backend::Fused, Backend::Torch}) {
    for (torch::Dtype d : {torch::kFloat32, torch::kFloat64, torch::kBFloat16}) {
      // LibTorch's own CPU SDPA has no bfloat16 backward before 2.x; Math and Fused cover bfloat16.
      if (b == Backend::Torch && d == torch::kBFloat16) continue;
      grid.push_back({b, d});
    }
  }
  return grid;
}

INSTANTIATE_TEST_SUITE_P(Backends, GroupedQueryAttention, ::testing::ValuesIn(gqa_grid()), gqa_param_name);

TEST(GroupedQueryAttentionCuda, MatchesRepeatedHeads) {
  if (skip_without(torch::kCUDA)) GTEST_SKIP() << "CUDA is not available: skipping GQA on CUDA";
  const GqaShape s{2, 8, 2, 33, 65, 64, 64};
  const Problem p = make_problem(s, MaskKind::Padding, true, CausalAlignment::BottomRight, 7);
  const auto cuda = [](const torch::Tensor& t) { return t.to(torch::kCUDA, torch::kFloat32); };
  AttentionMasks masks = p.masks;
  masks.key_padding_mask(masks.key_padding_mask().to(torch::kCUDA));
  for (Backend b : {Backend::Math, Backend::Torch}) {
    SCOPED_TRACE(to_string(b));
    const torch::Tensor out =
        attn::scaled_dot_product_attention(cuda(p.q), cuda(p.k), cuda(p.v), SdpaOptions().masks(masks).causal(true).backend(b));
    const torch::Tensor expected = std::get<0>(
        float64_attention(p.q, repeat_heads(p.k, 4), repeat_heads(p.v, 4), p.allowed, 1.0 / std::sqrt(64.0)));
    EXPECT_CLOSE(out.cpu().to(torch::kFloat64), expected, 1e-4);
  }
}

TEST(GroupedQueryAttention, HeadsThatDoNotDivideAreRefused) {
  const torch::Tensor q = torch::randn({1, 6, 4, 8}), k = torch::randn({1, 4, 4, 8});
  EXPECT_ERROR_CONTAINS(attn::scaled_dot_product_attention(q, k, k),
                        "key and value may have H_kv heads (dimension -3) where H_kv divides the query's heads");
  // Key and value must agree with each other.
  const torch::Tensor k2 = torch::randn({1, 2, 4, 8}), v3 = torch::randn({1, 3, 4, 8});
  EXPECT_ERROR_CONTAINS(attn::scaled_dot_product_attention(q, k2, v3),
                        "key and value must have the same number of heads (dimension -3)");
  // Other leading dimensions still must match.
  EXPECT_ERROR_CONTAINS(attn::scaled_dot_product_attention(q, torch::randn({2, 3, 4, 8}), torch::randn({2, 3, 4, 8})),
                        "must share their leading dimensions");
  // The op itself names its layout.
  EXPECT_ERROR_CONTAINS(ops::flash_attention(q, k, k), "with H_kv dividing the query's 6 heads");
}

// Inputs with more leading dimensions ([A, B, H, T, d]) group on dimension -3 too.
TEST(GroupedQueryAttention, GroupsOnDimensionMinus3AtRankFive) {
  torch::manual_seed(5);
  const torch::Tensor q = torch::randn({2, 3, 4, 6, 8}, torch::kFloat64);
  const torch::Tensor k = torch::randn({2, 3, 2, 7, 8}, torch::kFloat64);
  const torch::Tensor v = torch::randn({2, 3, 2, 7, 8}, torch::kFloat64);
  const torch::Tensor expected = std::get<0>(float64_attention(q, k.repeat_interleave(2, 2), v.repeat_interleave(2, 2),
                                                               torch::Tensor(), 1.0 / std::sqrt(8.0)));
  for (Backend b : {Backend::Math, Backend::Fused, Backend::Torch}) {
    SCOPED_TRACE(to_string(b));
    EXPECT_CLOSE(attn::scaled_dot_product_attention(q, k, v, SdpaOptions().backend(b)), expected, 1e-10);
  }
}

}  // namespace
}  // namespace attn::test
