// The fused CPU kernel (Backend::Fused, the attn::flash_attention op) against float64 references, on shapes
// chosen to hit every edge of the tiling: T = 1, odd T, T not a multiple of the block sizes, Tq != Tk both
// ways, d_k != d_v, every mask kind, causal in both alignments. Each instruction-set variant of the kernel
// runs the whole grid.

#include "kernel_variants.h"
#include "support.h"

#include <attn/ops/flash_attention.h>

#include <cmath>
#include <cstdio>
#include <limits>
#include <string>

namespace attn::test {
namespace {

struct Shape {
  int64_t batch, heads, tq, tk, dk, dv;
};

// Tiles are 128 query rows by 512 keys (forward) and 64 by 128 (backward): these shapes end in partial tiles.
const std::vector<Shape> kShapes = {
    {1, 1, 1, 1, 8, 8},       // T = 1
    {2, 3, 67, 67, 16, 16},   // odd, one partial query block
    {1, 2, 65, 300, 32, 32},  // Tq < Tk, partial blocks on both axes
    {2, 1, 257, 40, 8, 8},    // Tq > Tk: with bottom-right causal the first rows see no key
    {2, 2, 129, 130, 24, 40}, // d_k != d_v
    {1, 2, 300, 513, 64, 64}, // several key blocks, the last one partial
};

enum MaskKind { kNoMask, kPadding, kAttend, kAdditive, kAllMasks };
const std::vector<MaskKind> kMaskKinds = {kNoMask, kPadding, kAttend, kAdditive, kAllMasks};
const char* mask_name(MaskKind m) {
  switch (m) {
    case kNoMask: return "none";
    case kPadding: return "key_padding";
    case kAttend: return "attend";
    case kAdditive: return "additive";
    case kAllMasks: return "all";
  }
  return "?";
}

struct CausalKind {
  bool causal;
  CausalAlignment alignment;
  const char* name;
};
const std::vector<CausalKind> kCausalKinds = {{false, CausalAlignment::BottomRight, "not causal"},
                                              {true, CausalAlignment::BottomRight, "causal bottom-right"},
                                              {true, CausalAlignment::TopLeft, "causal top-left"}};

struct Problem {
  torch::Tensor q, k, v;
  AttentionMasks masks;
};

/// Random inputs in float64 (converted by the caller) and masks of the given kind. Masks broadcast in the
/// different ways the API allows: padding [B, 1, Tk], attend [Tq, Tk], additive [B, H, Tq, Tk] with -inf.
Problem make_problem(const Shape& s, MaskKind kind, uint64_t seed) {
  torch::manual_seed(seed);
  Problem p;
  const auto f64 = torch::kFloat64;
  p.q = torch::randn({s.batch, s.heads, s.tq, s.dk}, f64);
  p.k = torch::randn({s.batch, s.heads, s.tk, s.dk}, f64);
  p.v = torch::randn({s.batch, s.heads, s.tk, s.dv}, f64);
  if (kind == kPadding || kind == kAllMasks) p.masks.key_padding_mask(torch::rand({s.batch, 1, s.tk}) < 0.3);
  if (kind == kAttend || kind == kAllMasks) p.masks.attend_mask(torch::rand({s.tq, s.tk}) < 0.7);
  if (kind == kAdditive || kind == kAllMasks) {
    torch::Tensor add = torch::randn({s.batch, s.heads, s.tq, s.tk}, f64);
    p.masks.additive_mask(add.masked_fill(torch::rand(add.sizes()) < 0.2, -INFINITY));
  }
  return p;
}

AttentionMasks masks_as(const AttentionMasks& m, torch::Dtype dtype) {
  AttentionMasks out = m;
  if (m.additive_mask().defined()) out.additive_mask(m.additive_mask().to(dtype));
  return out;
}

SdpaOptions options_for(const CausalKind& c, const AttentionMasks& masks, Backend backend) {
  return SdpaOptions().masks(masks).causal(c.causal).causal_alignment(c.alignment).backend(backend);
}

class FusedKernel : public KernelVariantTest {};

// Forward: fused output against the float64 math path, which the PyTorch reference tests pin.
TEST_P(FusedKernel, ForwardMatchesFloat64Reference) {
  const torch::Dtype dtype = GetParam().dtype;
  const double tol = tolerance(dtype);
  uint64_t seed = 100;
  for (const Shape& s : kShapes) {
    for (MaskKind mk : kMaskKinds) {
      for (const CausalKind& ck : kCausalKinds) {
        SCOPED_TRACE(::testing::Message() << "B=" << s.batch << " H=" << s.heads << " Tq=" << s.tq << " Tk=" << s.tk
                                          << " dk=" << s.dk << " dv=" << s.dv << " masks=" << mask_name(mk) << ", "
                                          << ck.name);
        const Problem p = make_problem(s, mk, ++seed);
        const torch::Tensor expected =
            scaled_dot_product_attention(p.q, p.k, p.v, options_for(ck, p.masks, Backend::Math));
        const torch::Tensor actual =
            scaled_dot_product_attention(p.q.to(dtype), p.k.to(dtype), p.v.to(dtype),
                                         options_for(ck, masks_as(p.masks, dtype), Backend::Fused));
        ASSERT_EQ(actual.scalar_type(), dtype);
        EXPECT_CLOSE(actual.to(torch::kFloat64), expected, tol);
      }
    }
  }
}

// Backward: fused gradients against the float64 math path's autograd (in the input dtype's tolerance).
TEST_P(FusedKernel, BackwardMatchesFloat64Reference) {
  const torch::Dtype dtype = GetParam().dtype;
  // bfloat16 gradients are computed in float32 and rounded; the products of rounded inputs drift further.
  const double tol = dtype == torch::kBFloat16 ? 1e-1 : tolerance(dtype) * 10;
  uint64_t seed = 500;
  for (const Shape& s : kShapes) {
    for (MaskKind mk : {kNoMask, kAllMasks}) {
      for (const CausalKind& ck : kCausalKinds) {
        SCOPED_TRACE(::testing::Message() << "Tq=" << s.tq << " Tk=" << s.tk << " dk=" << s.dk << " dv=" << s.dv
                                          << " masks=" << mask_name(mk) << ", " << ck.name);
        const Problem p = make_problem(s, mk, ++seed);
        const torch::Tensor cotangent = torch::randn({s.batch, s.heads, s.tq, s.dv}, torch::kFloat64);
        const auto grads = [&](torch::Dtype dt, Backend backend) {
          // Fresh leaves each time (to() of the same dtype would return p's own tensors).
          const auto leaf = [&](const torch::Tensor& t) { return t.to(dt).clone().requires_grad_(); };
          torch::Tensor q = leaf(p.q), k = leaf(p.k), v = leaf(p.v);
          const torch::Tensor out =
              scaled_dot_product_attention(q, k, v, options_for(ck, masks_as(p.masks, dt), backend));
          (out * cotangent.to(dt)).sum().backward();
          return std::vector<torch::Tensor>{q.grad().to(torch::kFloat64), k.grad().to(torch::kFloat64),
                                            v.grad().to(torch::kFloat64)};
        };
        const auto expected = grads(torch::kFloat64, Backend::Math);
        const auto actual = grads(dtype, Backend::Fused);
        const char* names[] = {"d query", "d key", "d value"};
        for (int i = 0; i < 3; ++i) {
          SCOPED_TRACE(names[i]);
          EXPECT_TRUE(torch::isfinite(actual[i]).all().item<bool>());
          // Absolute as well as relative: with one key the exact d query and d key are 0, and any rounding
          // would fail a purely relative bound.
          EXPECT_TRUE(torch::allclose(actual[i], expected[i], tol, tol))
              << "max |fused - math| = " << (actual[i] - expected[i]).abs().max().item<double>();
        }
      }
    }
  }
}

// A NaN in a query row makes that row's output NaN, and only that row's: the tiles' row maxima (from the
// product on the bfloat16 route, from a pass elsewhere) must not turn it into a blocked row of zeros.
TEST_P(FusedKernel, NaNQueryRowStaysInItsRow) {
  const torch::Dtype dtype = GetParam().dtype;
  torch::manual_seed(31);
  torch::Tensor q = torch::randn({1, 2, 300, 64}, torch::kFloat64);
  const torch::Tensor k = torch::randn({1, 2, 600, 64}, torch::kFloat64);
  const torch::Tensor v = torch::randn({1, 2, 600, 64}, torch::kFloat64);
  q.index_put_({0, 1, 5}, NAN);
  for (bool causal : {false, true}) {
    SCOPED_TRACE(causal ? "causal" : "not causal");
    const auto opts = SdpaOptions().causal(causal);
    const torch::Tensor expected = scaled_dot_product_attention(q, k, v, SdpaOptions(opts).backend(Backend::Math));
    const torch::Tensor actual =
        scaled_dot_product_attention(q.to(dtype), k.to(dtype), v.to(dtype), SdpaOptions(opts).backend(Backend::Fused))
            .to(torch::kFloat64);
    EXPECT_TRUE(torch::isnan(actual[0][1][5]).all().item<bool>());
    EXPECT_EQ(torch::isnan(actual).sum().item<int64_t>(), 64);
    EXPECT_CLOSE(actual, expected, tolerance(dtype));  // NaN at the same places, the rest close
  }
}

INSTANTIATE_TEST_SUITE_P(Variants, FusedKernel, ::testing::ValuesIn(kernel_grid(/*blas_products=*/true, /*amx=*/true)),
                         kernel_param_name);

// An independent reference for the bool masks: attention written out element by element in float64.
TEST(FusedKernelReference, BoolMasksAgainstElementwiseFloat64) {
  const Shape s{2, 2, 70, 90, 16, 12};
  const Problem p = make_problem(s, kAllMasks, 7);
  AttentionMasks bool_only = p.masks;
  bool_only.additive_mask({});
  torch::Tensor allowed = bool_only.attend_mask().logical_and(bool_only.key_padding_mask().logical_not().unsqueeze(-2));
  allowed = allowed.logical_and(torch::arange(90).unsqueeze(0) <= torch::arange(70).unsqueeze(1) + 20);
  const double scale = 0.3;
  const auto [expected, weights] = float64_attention(p.q, p.k, p.v, allowed, scale);
  const torch::Tensor actual = scaled_dot_product_attention(
      p.q.to(torch::kFloat32), p.k.to(torch::kFloat32), p.v.to(torch::kFloat32),
      SdpaOptions().masks(bool_only).causal(true).scale(scale).backend(Backend::Fused));
  EXPECT_CLOSE(actual.to(torch::kFloat64), expected, tolerance(torch::kFloat32));
}

// Finite differences, float64, every mask kind and a fully masked query row.
TEST(FusedKernelReference, GradientsMatchFiniteDifferences) {
  torch::manual_seed(21);
  const auto leaf = [](at::IntArrayRef shape) { return torch::randn(shape, torch::kFloat64).requires_grad_(true); };
  const torch::Tensor q = leaf({1, 2, 5, 3}), k = leaf({1, 2, 6, 3}), v = leaf({1, 2, 6, 4});
  torch::Tensor attend = torch::rand({5, 6}) < 0.8;
  attend.index_put_({2}, false);  // query 2 may attend to nothing
  torch::Tensor padding = torch::zeros({1, 1, 6}, torch::kBool);
  padding.index_put_({0, 0, 5}, true);
  const torch::Tensor additive = torch::randn({1, 2, 5, 6}, torch::kFloat64);
  const SdpaOptions opts = SdpaOptions()
                               .masks(AttentionMasks().attend_mask(attend).key_padding_mask(padding).additive_mask(additive))
                               .causal(true)
                               .backend(Backend::Fused);
  const torch::Tensor cotangent = torch::randn({1, 2, 5, 4}, torch::kFloat64);
  const auto loss = [&] { return (scaled_dot_product_attention(q, k, v, opts) * cotangent).sum(); };
  loss().backward();
  constexpr double eps = 1e-6;
  for (const torch::Tensor& t : {q, k, v}) {
    const torch::Tensor analytic = t.grad().clone();
    torch::NoGradGuard no_grad;
    torch::Tensor flat = t.view(-1);
    torch::Tensor numeric = torch::zeros_like(flat);
    for (int64_t j = 0; j < flat.numel(); ++j) {
      const double saved = flat[j].item<double>();
      flat[j] = saved + eps;
      const double plus = loss().item<double>();
      flat[j] = saved - eps;
      const double minus = loss().item<double>();
      flat[j] = saved;
      numeric[j] = (plus - minus) / (2 * eps);
    }
    EXPECT_TRUE(torch::allclose(analytic.view(-1), numeric, 1e-6, 1e-8))
        << "max |autograd - finite difference| = " << (analytic.view(-1) - numeric).abs().max().item<double>();
  }
  // The fully masked row gives a zero output and contributes no gradient to q.
  EXPECT_EQ(q.grad().select(2, 2).abs().max().item<double>(), 0.0);
}

// A NaN or Inf at a key or value that is masked out never reaches the output or the gradients.
TEST(FusedKernelReference, NonFiniteValuesAtMaskedKeysStayOut) {
  torch::manual_seed(4);
  torch::Tensor q = torch::randn({1, 1, 70, 8}), k = torch::randn({1, 1, 300, 8}), v = torch::randn({1, 1, 300, 8});
  torch::Tensor padding = torch::zeros({1, 1, 300}, torch::kBool);
  for (int64_t j : {3, 150, 299}) padding.index_put_({0, 0, j}, true);
  k.index_put_({0, 0, 3}, NAN);
  v.index_put_({0, 0, 150}, INFINITY);
  v.index_put_({0, 0, 299}, NAN);
  q.requires_grad_(), k.requires_grad_(), v.requires_grad_();
  const AttentionMasks masks = AttentionMasks().key_padding_mask(padding);
  const torch::Tensor out = scaled_dot_product_attention(q, k, v, SdpaOptions().masks(masks).backend(Backend::Fused));
  EXPECT_TRUE(torch::isfinite(out).all().item<bool>());
  out.sum().backward();
  EXPECT_TRUE(torch::isfinite(v.grad()).all().item<bool>());
  EXPECT_TRUE(torch::isfinite(k.grad()).all().item<bool>());
  // Stricter than the math path, whose q gradient is (d scores)·k: 0 · NaN there is NaN.
  EXPECT_TRUE(torch::isfinite(q.grad()).all().item<bool>());
  const torch::Tensor expected =
      scaled_dot_product_attention(q.detach(), k.detach(), v.detach(), SdpaOptions().masks(masks).backend(Backend::Math));
  EXPECT_CLOSE(out.detach(), expected, tolerance(torch::kFloat32));
}

// The float tiles (float32 on AVX-512) and AMX's tiles (bfloat16 where the CPU has them) pack K and V into buffers
// that the calling thread keeps for its next call, up to 8 MB each, in slots that the two routes share whatever
// their element types (products/kept_buffer.h). float32 and bfloat16 calls in turn, which grow the slots across
// element types, reuse larger ones and pack past 8 MB (a buffer of the call's own): each call's output and
// gradients against float64 attention on the same values, so that a call that read a pack of another shape,
// another type or the call before would fail. Other routes (the bfloat16 pairs, BLAS) run the same calls.
TEST(FusedKernelReference, PacksKeptBetweenCallsOfEveryDtypeAndSize) {
  torch::manual_seed(12);
  struct Call {
    torch::Dtype dtype;
    int64_t batch, heads, keys;
  };
  // 64 x 8 heads of 160 keys of 64: float32's Kᵀ packed is 25 MB, past what a thread keeps.
  const std::vector<Call> calls = {{torch::kFloat32, 1, 2, 96},   {torch::kBFloat16, 4, 4, 512},
                                   {torch::kFloat32, 4, 4, 512},  {torch::kBFloat16, 1, 2, 96},
                                   {torch::kFloat32, 64, 8, 160}, {torch::kBFloat16, 2, 4, 300},
                                   {torch::kFloat32, 2, 4, 300}};
  // Which routes these calls take here: the slots are shared across element types only where both keep packs.
  const CpuKernelInfo info = cpu_kernel_info();
  std::printf("[ NOTE     ] float32 on the %s products, bfloat16 %s\n", info.float_products.c_str(),
              info.amx_tiles ? "on AMX's tiles" : info.bfloat16_route ? "on the pairs (packed per call)" : "widened");
  for (const Call& call : calls) {
    const bool bf16 = call.dtype == torch::kBFloat16;
    const std::string name = std::string(bf16 ? "bfloat16, " : "float32, ") + std::to_string(call.batch) + " x " +
                             std::to_string(call.heads) + " heads of " + std::to_string(call.keys) + " keys";
    SCOPED_TRACE(name);
    const auto draw = [&] { return torch::randn({call.batch, call.heads, call.keys, 64}).to(call.dtype); };
    const torch::Tensor q = draw(), k = draw(), v = draw(), cotangent = draw();
    const auto fused = [](const torch::Tensor& ql, const torch::Tensor& kl, const torch::Tensor& vl) {
      return scaled_dot_product_attention(ql, kl, vl, SdpaOptions().backend(Backend::Fused));
    };
    for (const auto& [what, mean, max] : errors_against_float64(q, k, v, cotangent, fused)) {
      std::printf("[ NOTE     ] %s, %s: mean error %.2e, max %.2e of the mean size\n", name.c_str(), what, mean, max);
      // bfloat16: the bounds of Bf16Route.PacksKeptBetweenCallsOfEverySize, which rounding's tail sets; float32
      // computes in float, a few units of its last place.
      EXPECT_LE(mean, bf16 ? 4e-3 : 1e-5) << what;
      EXPECT_LE(max, bf16 ? 0.25 : 1e-3) << what;
    }
  }
}

// Empty and degenerate sizes give the defined empty or zero results.
TEST(FusedKernelReference, EmptyAndFullyMaskedInputs) {
  const auto fused = SdpaOptions().backend(Backend::Fused);
  EXPECT_EQ(scaled_dot_product_attention(torch::randn({0, 2, 5, 4}), torch::randn({0, 2, 5, 4}),
                                         torch::randn({0, 2, 5, 3}), fused)
                .sizes(),
            at::IntArrayRef({0, 2, 5, 3}));
  EXPECT_EQ(scaled_dot_product_attention(torch::randn({1, 2, 0, 4}), torch::randn({1, 2, 5, 4}),
                                         torch::randn({1, 2, 5, 3}), fused)
                .sizes(),
            at::IntArrayRef({1, 2, 0, 3}));
  // No keys at all: every query gets zeros.
  const torch::Tensor no_keys = scaled_dot_product_attention(torch::randn({1, 2, 5, 4}), torch::randn({1, 2, 0, 4}),
                                                             torch::randn({1, 2, 0, 3}), fused);
  EXPECT_EQ(no_keys.sizes(), at::IntArrayRef({1, 2, 5, 3}));
  EXPECT_EQ(no_keys.abs().max().item<double>(), 0.0);
  // Every key padded: zeros, and logsumexp -inf from the op itself.
  const torch::Tensor padding = torch::ones({1, 1, 7}, torch::kBool);
  ops::FlashArguments padded;
  padded.key_padding_mask = padding;
  auto [out, lse] = ops::flash_attention(torch::randn({1, 2, 5, 4}), torch::randn({1, 2, 7, 4}),
                                         torch::randn({1, 2, 7, 3}), padded);
  EXPECT_EQ(out.abs().max().item<double>(), 0.0);
  EXPECT_TRUE(torch::isneginf(lse).all().item<bool>());
}

// Strided inputs (transposed heads, stride-0 expanded keys) read correctly without the caller copying.
TEST(FusedKernelReference, StridedAndExpandedInputs) {
  torch::manual_seed(8);
  const torch::Tensor q = torch::randn({2, 33, 3, 16}).transpose(1, 2);     // [B, H, T, d] view of [B, T, H, d]
  const torch::Tensor k = torch::randn({2, 3, 1, 16}).expand({2, 3, 40, 16});  // stride 0 along T
  const torch::Tensor v = torch::randn({2, 3, 16, 40}).transpose(2, 3);       // d not contiguous
  const torch::Tensor expected = scaled_dot_product_attention(q.contiguous(), k.contiguous(), v.contiguous(),
                                                              SdpaOptions().backend(Backend::Math));
  const torch::Tensor actual = scaled_dot_product_attention(q, k, v, SdpaOptions().backend(Backend::Fused));
  EXPECT_CLOSE(actual, expected, tolerance(torch::kFloat32));
}

// Inputs of every rank the functional API takes: [T, d], [N, T, d], [B, H, T, d] and [A, B, H, T, d].
TEST(FusedKernelReference, EveryInputRank) {
  torch::manual_seed(9);
  for (const std::vector<int64_t>& lead : std::vector<std::vector<int64_t>>{{}, {3}, {2, 3}, {2, 2, 3}}) {
    std::vector<int64_t> qs = lead, ks = lead, pad = lead;
    qs.insert(qs.end(), {9, 8});
    ks.insert(ks.end(), {11, 8});
    pad.push_back(11);
    if (!lead.empty()) pad[lead.size() - 1] = 1;  // broadcast along the last leading dimension
    const torch::Tensor q = torch::randn(qs), k = torch::randn(ks), v = torch::randn(ks);
    const AttentionMasks masks = AttentionMasks()
                                     .key_padding_mask(torch::rand(pad) < 0.3)
                                     .attend_mask(torch::rand({9, 11}) < 0.8);
    const auto opts = SdpaOptions().masks(masks).causal(true);
    SCOPED_TRACE(::testing::Message() << "query " << q.sizes());
    EXPECT_CLOSE(scaled_dot_product_attention(q, k, v, SdpaOptions(opts).backend(Backend::Fused)),
                 scaled_dot_product_attention(q, k, v, SdpaOptions(opts).backend(Backend::Math)),
                 tolerance(torch::kFloat32));
  }
}

// What applies per head (ALiBi's slopes, the sinks, grouped-query key and value heads) applies along dimension -3
// at every rank, [H, T, d] included: each rank against the same problem as [B, H, T, d] in float64.
TEST(FusedKernelReference, PerHeadOptionsAtEveryInputRank) {
  torch::manual_seed(10);
  const int64_t heads = 4, kv_heads = 2;
  for (const std::vector<int64_t>& outer : std::vector<std::vector<int64_t>>{{}, {2}, {2, 3}}) {
    std::vector<int64_t> qs = outer, ks = outer;
    qs.insert(qs.end(), {heads, 9, 8});
    ks.insert(ks.end(), {kv_heads, 11, 8});
    const torch::Tensor q = torch::randn(qs, torch::kFloat64), k = torch::randn(ks, torch::kFloat64),
                        v = torch::randn(ks, torch::kFloat64);
    const auto opts = SdpaOptions().causal(true).alibi_slopes(attn::alibi_slopes(heads).to(torch::kFloat64))
                          .sinks(torch::randn({heads}, torch::kFloat64));
    const auto as_4d = [](const torch::Tensor& x) { return x.reshape({-1, x.size(-3), x.size(-2), x.size(-1)}); };
    const torch::Tensor expected =
        scaled_dot_product_attention(as_4d(q), as_4d(k), as_4d(v), SdpaOptions(opts).backend(Backend::Math));
    SCOPED_TRACE(::testing::Message() << "query " << q.sizes());
    const torch::Tensor actual = scaled_dot_product_attention(q, k, v, SdpaOptions(opts).backend(Backend::Fused));
    ASSERT_EQ(actual.dim(), q.dim());
    EXPECT_CLOSE(as_4d(actual), expected, tolerance(torch::kFloat64));
  }
}


/// Whether backward() refused with autograd's version check.
::testing::AssertionResult refused_as_changed_in_place(const torch::Tensor& out) {
  try {
    out.sum().backward();
  } catch (const c10::Error& e) {
    if (std::string(e.what()).find("modified by an inplace operation") != std::string::npos) {
      return ::testing::AssertionSuccess();
    }
    return ::testing::AssertionFailure() << "another error: " << e.what();
  }
  return ::testing::AssertionFailure() << "backward ran on the changed argument";
}

// The backward pass recomputes the probabilities from the masks, the slopes and the packed boundaries. A caller
// that refills one of them in place between forward and backward (the next micro-batch's mask, say) must get
// autograd's error, as from PyTorch's own ops, not the gradients of other probabilities.
TEST(FusedKernelReference, ArgumentsChangedInPlaceBeforeBackwardAreRefused) {
  torch::manual_seed(11);
  const auto leaf = [](at::IntArrayRef shape) { return torch::randn(shape, torch::kFloat64).requires_grad_(true); };
  const torch::Tensor q = leaf({2, 2, 6, 8}), k = leaf({2, 2, 9, 8}), v = leaf({2, 2, 9, 8});
  const auto fused = [&](const SdpaOptions& o) {
    return scaled_dot_product_attention(q, k, v, SdpaOptions(o).backend(Backend::Fused));
  };
  {
    torch::Tensor attend = torch::rand({6, 9}) < 0.7;
    const torch::Tensor out = fused(SdpaOptions().masks(AttentionMasks().attend_mask(attend)));
    attend.fill_(true);
    EXPECT_TRUE(refused_as_changed_in_place(out)) << "attend_mask";
  }
  {
    torch::Tensor padding = torch::zeros({2, 1, 9}, torch::kBool);
    const torch::Tensor out = fused(SdpaOptions().masks(AttentionMasks().key_padding_mask(padding)));
    padding.narrow(-1, 0, 4).fill_(true);  // a view of it, changed in place
    EXPECT_TRUE(refused_as_changed_in_place(out)) << "key_padding_mask";
  }
  {
    torch::Tensor additive = torch::randn({2, 2, 6, 9}, torch::kFloat64);
    const torch::Tensor out = fused(SdpaOptions().masks(AttentionMasks().additive_mask(additive)));
    additive.mul_(3.0);
    EXPECT_TRUE(refused_as_changed_in_place(out)) << "additive_mask";
  }
  {
    torch::Tensor slopes = torch::tensor({0.5, 0.25}, torch::kFloat64);
    const torch::Tensor out = fused(SdpaOptions().alibi_slopes(slopes));
    slopes.mul_(2.0);
    EXPECT_TRUE(refused_as_changed_in_place(out)) << "alibi_slopes";
  }
  {
    const torch::Tensor pq = leaf({10, 2, 8}), pk = leaf({10, 2, 8}), pv = leaf({10, 2, 8});
    torch::Tensor cu = torch::tensor({0, 4, 10}, torch::kLong);
    const torch::Tensor out = varlen_attention(pq, pk, pv, cu, cu, 6, 6, SdpaOptions().backend(Backend::Fused));
    cu[1] = 7;
    EXPECT_TRUE(refused_as_changed_in_place(out)) << "cu_seqlens";
  }
  {
    // Unchanged arguments: backward runs, and its gradient is the float64 definition's.
    q.mutable_grad() = torch::Tensor();
    const torch::Tensor attend = (torch::rand({6, 9}) < 0.7).logical_or(torch::eye(6, 9, torch::kBool));
    fused(SdpaOptions().masks(AttentionMasks().attend_mask(attend))).sum().backward();
    const torch::Tensor q2 = q.detach().clone().requires_grad_(true);
    const torch::Tensor scores = q2.matmul(k.detach().transpose(-2, -1)) / std::sqrt(8.0);
    torch::softmax(scores.masked_fill(attend.logical_not(), -INFINITY), -1).matmul(v.detach()).sum().backward();
    EXPECT_CLOSE(q.grad(), q2.grad(), tolerance(torch::kFloat64));
  }
}

}  // namespace
}  // namespace attn::test
