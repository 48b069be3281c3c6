// attn's CUDA kernels and routes on a GPU: the decode kernel over a KV cache, the attention variants (window,
// soft-capping, ALiBi, sinks, packed sequences) on LibTorch's FlashAttention-2 or attn's own kernel, and
// ring attention on one rank over NCCL. Each checks against attention written out in float64 on the CPU.
// Every suite here has "Cuda" in its name: without a GPU its cases skip visibly (CTest's SUITE.cuda tests).

#include "support.h"

#include <attn/distributed/nccl.h>
#include <attn/distributed/ring_attention.h>
#include <attn/distributed/sequence_layout.h>
#include <attn/ops/decode_attention.h>
#include <attn/ops/flash_attention.h>

#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <vector>

namespace attn::test {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

/// What a row of the float64 definition needs besides q, k and v.
struct Terms {
  double softcap = 0.0;
  torch::Tensor slopes;  // [H] or [B, H], or undefined
  torch::Tensor sinks;   // [H], or undefined
};

/// Attention from its definition in float64 on the CPU: softmax over the allowed keys of q·kᵀ·scale,
/// soft-capped, minus slope · |p - j| (p: the query's diagonal position, `positions` [B, Tq]), with one sink
/// logit per head in the denominator. k and v [B, H_kv, Tk, d] serve H / H_kv query heads each. `allowed`
/// [B, 1, Tq, Tk]. Returns (output, logsumexp); rows without an allowed key (and no sink) give zeros.
/// Differentiable with respect to q, k, v and the sinks.
std::tuple<torch::Tensor, torch::Tensor> float64_reference(const torch::Tensor& q_in, const torch::Tensor& k_in,
                                                           const torch::Tensor& v_in, const torch::Tensor& allowed,
                                                           const torch::Tensor& positions, double scale,
                                                           const Terms& terms) {
  const auto f64 = [](const torch::Tensor& t) { return t.to(torch::kCPU, torch::kFloat64); };
  const torch::Tensor q = f64(q_in);
  const int64_t group = q.size(1) / k_in.size(1), tk = k_in.size(2);
  const torch::Tensor k = f64(k_in).repeat_interleave(group, 1), v = f64(v_in).repeat_interleave(group, 1);
  torch::Tensor s = torch::matmul(q, k.transpose(-1, -2)) * scale;
  if (terms.softcap > 0) s = terms.softcap * torch::tanh(s / terms.softcap);
  if (terms.slopes.defined()) {
    const torch::Tensor distance =
        (positions.to(torch::kFloat64).unsqueeze(-1) - torch::arange(tk, torch::kFloat64)).abs().unsqueeze(1);
    const torch::Tensor slopes = f64(terms.slopes);
    const torch::Tensor per_head = slopes.dim() == 1 ? slopes.view({1, -1, 1, 1}) : slopes.view({slopes.size(0), -1, 1, 1});
    s = s - per_head * distance;
  }
  s = s.masked_fill(allowed.logical_not().to(torch::kCPU), -kInf);
  if (terms.sinks.defined()) {
    const torch::Tensor sink = f64(terms.sinks).view({1, -1, 1, 1}).expand({s.size(0), s.size(1), s.size(2), 1});
    s = torch::cat({s, sink}, -1);
  }
  const torch::Tensor lse = torch::logsumexp(s, -1);
  torch::Tensor p = torch::exp(s - lse.unsqueeze(-1));
  p = torch::where(torch::isnan(p), torch::zeros_like(p), p);  // a row with no key at all
  if (terms.sinks.defined()) p = p.narrow(-1, 0, tk);
  return {torch::matmul(p, v), lse};
}

/// The band of backends/masks.h: key j is allowed for a query on diagonal position p iff p - left <= j <=
/// p + right (-1 unbounded), causality bounding right at 0, and j < length.
bool in_band(int64_t j, int64_t p, int64_t length, bool causal, int64_t left, int64_t right) {
  const int64_t r = causal ? (right < 0 ? 0 : std::min<int64_t>(right, 0)) : right;
  return j < length && (left < 0 || j >= p - left) && (r < 0 || j <= p + r);
}

bool skip_without_gpu() { return skip_without(torch::kCUDA); }

// ---------------------------------------------------------------------------------------------------------
// The decode kernel.

struct DecodeCase {
  int64_t heads, kv_heads, tq;
  std::vector<int64_t> lengths;  // per row; capacity is the largest + 7
  bool causal;
  int64_t d;
  int64_t left = -1, right = -1;
  double softcap = 0.0;
  bool alibi = false, sinks = false;
};

// Lengths 0, 1, odd, and long enough for several splits; packed rows (group x Tq) from 1 to 48 (more than one
// block's 8); head sizes 64, 80, 128 and 256; every variant, alone and together.
const std::vector<DecodeCase> kDecodeCases = {
    {4, 1, 1, {1}, true, 64},
    {8, 2, 1, {1000}, true, 128},
    {32, 8, 1, {8192, 77, 0}, true, 128},
    {6, 3, 3, {257, 3}, true, 64, 16, -1},
    {8, 8, 4, {513, 600}, true, 80, -1, -1, 30.0},
    {16, 2, 2, {300, 41}, true, 256, -1, -1, 0.0, true, true},
    {4, 4, 5, {9, 1200}, false, 64, 100, 3},
    {12, 4, 16, {2000}, true, 128, 500, -1, 20.0, true, true},
};

class CudaDecodeKernel : public ::testing::TestWithParam<torch::Dtype> {
 protected:
  void SetUp() override {
    if (skip_without_gpu()) GTEST_SKIP() << "CUDA is not available: skipping the CUDA decode kernel";
  }
};

TEST_P(CudaDecodeKernel, MatchesFloat64DefinitionWithEveryVariant) {
  const torch::Dtype dtype = GetParam();
  const auto cuda = torch::TensorOptions().device(torch::kCUDA).dtype(dtype);
  uint64_t seed = 900;
  for (const DecodeCase& c : kDecodeCases) {
    const int64_t B = static_cast<int64_t>(c.lengths.size());
    const int64_t capacity = *std::max_element(c.lengths.begin(), c.lengths.end()) + 7;
    SCOPED_TRACE(::testing::Message() << "H=" << c.heads << " H_kv=" << c.kv_heads << " Tq=" << c.tq << " first length "
                                      << c.lengths[0] << " d=" << c.d << " window=" << c.left << "," << c.right
                                      << " softcap=" << c.softcap << " alibi=" << c.alibi << " sinks=" << c.sinks);
    torch::manual_seed(++seed);
    const torch::Tensor q = torch::randn({B, c.heads, c.tq, c.d}, torch::kFloat64);
    const torch::Tensor kc = torch::randn({B, c.kv_heads, capacity, c.d}, torch::kFloat64);
    const torch::Tensor vc = torch::randn({B, c.kv_heads, capacity, c.d}, torch::kFloat64);
    std::vector<int64_t> starts;
    for (int64_t l : c.lengths) starts.push_back(std::max<int64_t>(l - c.tq, 0));
    torch::Tensor allowed = torch::zeros({B, 1, c.tq, capacity}, torch::kBool);
    torch::Tensor positions = torch::zeros({B, c.tq}, torch::kLong);
    auto a = allowed.accessor<bool, 4>();
    auto pos = positions.accessor<int64_t, 2>();
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t t = 0; t < c.tq; ++t) {
        pos[b][t] = starts[b] + t;
        for (int64_t j = 0; j < capacity; ++j) a[b][0][t][j] = in_band(j, pos[b][t], c.lengths[b], c.causal, c.left, c.right);
      }
    }
    Terms terms;
    terms.softcap = c.softcap;
    SdpaOptions options = SdpaOptions().causal(c.causal).window(c.left, c.right).softcap(c.softcap);
    if (c.alibi) {
      terms.slopes = alibi_slopes(c.heads);
      options.alibi_slopes(terms.slopes.to(torch::kCUDA));
    }
    if (c.sinks) {
      terms.sinks = torch::randn({c.heads}, torch::kFloat64);
      options.sinks(terms.sinks.to(cuda));
    }
    const torch::Tensor expected =
        std::get<0>(float64_reference(q.to(dtype), kc.to(dtype), vc.to(dtype), allowed, positions,
                                      1.0 / std::sqrt(static_cast<double>(c.d)), terms));
    const torch::Tensor qd = q.to(cuda), kd = kc.to(cuda), vd = vc.to(cuda);
    // Backend::Fused runs the decode kernel; Auto gives the cache to LibTorch's kernels, faster on a GPU.
    for (const Backend backend : {Backend::Fused, Backend::Auto}) {
      SCOPED_TRACE(to_string(backend));
      SdpaOptions with = options;
      with.backend(backend);
      const std::string route = describe_route_with_kv_cache(qd, kd, vd, longs(starts), longs(c.lengths), with);
      if (backend == Backend::Fused) {
        EXPECT_EQ(route, "decode (cuda)");
      } else {
        EXPECT_NE(route, "decode (cuda)");
      }
      const torch::Tensor out = attention_with_kv_cache(qd, kd, vd, longs(starts), longs(c.lengths), with);
      ASSERT_TRUE(out.is_cuda());
      ASSERT_EQ(out.scalar_type(), dtype);
      EXPECT_CLOSE(out, expected, tolerance(dtype));
    }
  }
}

TEST_P(CudaDecodeKernel, ANonFiniteValueAtABlockedKeyContributesNothing) {
  const torch::Dtype dtype = GetParam();
  const auto cuda = torch::TensorOptions().device(torch::kCUDA).dtype(dtype);
  torch::manual_seed(4);
  const torch::Tensor q = torch::randn({1, 2, 3, 64}, cuda);
  const torch::Tensor kc = torch::randn({1, 2, 10, 64}, cuda);
  torch::Tensor vc = torch::randn({1, 2, 10, 64}, cuda);
  vc.index_put_({0, 0, 9}, INFINITY);  // the last new key: blocked for the first two of the three queries
  vc.index_put_({0, 1, 9}, NAN);
  const torch::Tensor out = ops::decode_attention(q, kc, vc, longs({7}), longs({10}));
  EXPECT_TRUE(torch::isfinite(out.narrow(2, 0, 2)).all().item<bool>());
  EXPECT_FALSE(torch::isfinite(out.index({0, 0, 2})).all().item<bool>());
  const torch::Tensor empty = ops::decode_attention(q, kc, vc, longs({0}), longs({0}));
  EXPECT_TRUE(torch::equal(empty.cpu(), torch::zeros_like(empty).cpu()));  // no key: zero rows, no NaN
}

INSTANTIATE_TEST_SUITE_P(Dtypes, CudaDecodeKernel, ::testing::Values(torch::kFloat32, torch::kFloat16, torch::kBFloat16),
                         [](const auto& info) { return std::string(c10::toString(info.param)); });

// An int8 cache, a paged cache and a token tree are read by the CPU decode kernel only: on a GPU each is refused
// by name, at the call the user made, before anything is written.
TEST(CudaServingCaches, Int8PagedAndTreeInputsAreRefusedClearly) {
  if (skip_without_gpu()) GTEST_SKIP() << "CUDA is not available: skipping the refusals of CPU-only caches on CUDA";
  EXPECT_ERROR_CONTAINS(KVCache(KVCacheOptions(1, 1, 2, 64, 16).dtype(torch::kInt8).device(torch::kCUDA)),
                        "an int8 cache is read by the CPU decode kernel only");
  const auto cuda = torch::TensorOptions().device(torch::kCUDA);
  const torch::Tensor q = torch::randn({1, 4, 1, 64}, cuda), kc = torch::randn({1, 2, 16, 64}, cuda);
  EXPECT_ERROR_CONTAINS(ops::decode_attention(q, kc, kc, longs({3}), longs({4}), true, c10::nullopt, -1, -1, 0.0,
                                              c10::nullopt, c10::nullopt, c10::nullopt, c10::nullopt,
                                              torch::zeros({1, 1}, torch::kLong)),
                        "paged caches and token trees are read by the CPU kernel only");
  KVCache cache(KVCacheOptions(1, 1, 2, 64, 16).device(torch::kCUDA));
  cache.append(0, torch::randn({1, 2, 4, 64}, cuda), torch::randn({1, 2, 4, 64}, cuda));
  torch::NoGradGuard no_grad;
  EXPECT_ERROR_CONTAINS(attention_over_token_tree(torch::randn({1, 4, 2, 64}, cuda), cache, 0, TokenTree({-1, 0})),
                        "a token tree is read by attn's CPU decode kernel only");
}

TEST(CudaDecodeKernelRoutes, WhatItCannotRunGoesToTheGeneralBackendsOrIsRefusedClearly) {
  if (skip_without_gpu()) GTEST_SKIP() << "CUDA is not available: skipping the CUDA decode kernel's routes";
  const auto cuda64 = torch::TensorOptions().device(torch::kCUDA).dtype(torch::kFloat64);
  const torch::Tensor q = torch::randn({1, 4, 1, 64}, cuda64), kc = torch::randn({1, 2, 20, 64}, cuda64);
  const torch::Tensor vc = torch::randn({1, 2, 20, 64}, cuda64);
  const ops::DecodeKernelSupport support = ops::decode_attention_support(q, kc, vc);
  EXPECT_FALSE(support.supported);
  EXPECT_NE(support.reason.find("Double"), std::string::npos) << support.reason;
  EXPECT_NE(describe_route_with_kv_cache(q, kc, vc, longs({19}), longs({20})), "decode (cuda)");
  EXPECT_ERROR_CONTAINS(ops::decode_attention(q, kc, vc, longs({19}), longs({20})), "no CUDA kernel for these inputs");
  // The general backends give the same answer as float64's definition.
  torch::Tensor allowed = torch::ones({1, 1, 1, 20}, torch::kBool);
  const torch::Tensor expected =
      std::get<0>(float64_reference(q, kc, vc, allowed, longs({19}).view({1, 1}), 1.0 / 8.0, Terms{}));
  EXPECT_CLOSE(attention_with_kv_cache(q, kc, vc, longs({19}), longs({20})), expected, tolerance(torch::kFloat64));
}

// ---------------------------------------------------------------------------------------------------------
// The attention variants.

struct VariantCase {
  int64_t heads, kv_heads, tq, tk, d;
  bool causal;
  CausalAlignment alignment;
  int64_t left, right;
  double softcap;
  bool alibi, sinks;
  const char* route;  // what describe_route must say
};

const std::vector<VariantCase> kVariantCases = {
    {8, 2, 300, 300, 64, true, CausalAlignment::BottomRight, 100, -1, 0.0, false, false, "fused (cuda:libtorch)"},
    {4, 4, 257, 257, 128, true, CausalAlignment::BottomRight, -1, -1, 0.0, true, false, "fused (cuda:attn)"},
    {4, 1, 200, 200, 64, true, CausalAlignment::BottomRight, -1, -1, 0.0, false, true, "fused (cuda:libtorch)"},
    {4, 2, 96, 257, 64, true, CausalAlignment::BottomRight, -1, -1, 0.0, true, true, "fused (cuda:attn)"},
    {4, 2, 96, 257, 64, true, CausalAlignment::BottomRight, -1, -1, 0.0, false, true, "fused (cuda:libtorch)"},
    {4, 4, 150, 150, 64, false, CausalAlignment::BottomRight, 20, 7, 0.0, false, false, "fused (cuda:libtorch)"},
    // Sinks alone, as many K/V heads as query heads: the SDPA kernel that gives the log-sum-exp (cuDNN's).
    {4, 4, 384, 384, 128, true, CausalAlignment::BottomRight, -1, -1, 0.0, false, true, "fused (cuda:libtorch)"},
    {4, 2, 333, 333, 128, true, CausalAlignment::BottomRight, -1, -1, 30.0, false, false, "fused (cuda:attn)"},
    {6, 3, 100, 260, 64, true, CausalAlignment::BottomRight, 64, -1, 20.0, true, true, "fused (cuda:attn)"},
    {4, 4, 90, 200, 128, true, CausalAlignment::TopLeft, 50, -1, 0.0, false, false, "fused (cuda:attn)"},
    {2, 2, 129, 65, 64, true, CausalAlignment::BottomRight, -1, -1, 50.0, false, true, "fused (cuda:attn)"},
};

class CudaVariants : public ::testing::TestWithParam<torch::Dtype> {
 protected:
  void SetUp() override {
    if (skip_without_gpu()) GTEST_SKIP() << "CUDA is not available: skipping the attention variants on CUDA";
  }
};

/// [1, 1, Tq, Tk] allowed pairs and [1, Tq] diagonal positions of a dense variant case.
std::pair<torch::Tensor, torch::Tensor> dense_band(const VariantCase& c) {
  const int64_t offset = c.alignment == CausalAlignment::BottomRight ? c.tk - c.tq : 0;
  torch::Tensor allowed = torch::zeros({1, 1, c.tq, c.tk}, torch::kBool);
  torch::Tensor positions = torch::arange(c.tq, torch::kLong).view({1, -1}) + offset;
  auto a = allowed.accessor<bool, 4>();
  for (int64_t i = 0; i < c.tq; ++i)
    for (int64_t j = 0; j < c.tk; ++j) a[0][0][i][j] = in_band(j, i + offset, c.tk, c.causal, c.left, c.right);
  return {allowed, positions};
}

SdpaOptions variant_options(const VariantCase& c, Terms& terms, const torch::TensorOptions& cuda) {
  SdpaOptions options =
      SdpaOptions().causal(c.causal).causal_alignment(c.alignment).window(c.left, c.right).softcap(c.softcap);
  terms.softcap = c.softcap;
  if (c.alibi) {
    terms.slopes = alibi_slopes(c.heads);
    options.alibi_slopes(terms.slopes.to(torch::kCUDA));
  }
  if (c.sinks) {
    terms.sinks = torch::randn({c.heads}, torch::kFloat64);
    options.sinks(terms.sinks.to(cuda));
  }
  return options;
}

TEST_P(CudaVariants, MatchFloat64DefinitionBlockwise) {
  const torch::Dtype dtype = GetParam();
  const auto cuda = torch::TensorOptions().device(torch::kCUDA).dtype(dtype);
  uint64_t seed = 700;
  for (const VariantCase& c : kVariantCases) {
    SCOPED_TRACE(::testing::Message() << "H=" << c.heads << "/" << c.kv_heads << " Tq=" << c.tq << " Tk=" << c.tk
                                      << " d=" << c.d << " window=" << c.left << "," << c.right << " softcap=" << c.softcap
                                      << " alibi=" << c.alibi << " sinks=" << c.sinks << " route " << c.route);
    torch::manual_seed(++seed);
    const torch::Tensor q = torch::randn({2, c.heads, c.tq, c.d}, cuda), k = torch::randn({2, c.kv_heads, c.tk, c.d}, cuda);
    const torch::Tensor v = torch::randn({2, c.kv_heads, c.tk, c.d}, cuda);
    Terms terms;
    const SdpaOptions options = variant_options(c, terms, cuda);
    auto [allowed, positions] = dense_band(c);
    const torch::Tensor expected = std::get<0>(
        float64_reference(q, k, v, allowed, positions.expand({2, c.tq}), 1.0 / std::sqrt(double(c.d)), terms));
    EXPECT_EQ(describe_route(q, k, v, options), c.route);
    const torch::Tensor out = scaled_dot_product_attention(q, k, v, options);
    ASSERT_EQ(out.scalar_type(), dtype);
    EXPECT_CLOSE(out, expected, tolerance(dtype));
  }
}

// The routes on LibTorch's kernels are differentiable: windows, sinks (their gradient too), GQA.
TEST_P(CudaVariants, GradientsOnFlashAttentionMatchFloat64Definition) {
  const torch::Dtype dtype = GetParam();
  const auto cuda = torch::TensorOptions().device(torch::kCUDA).dtype(dtype);
  for (const VariantCase& c : {kVariantCases[0], kVariantCases[2], kVariantCases[4], kVariantCases[5], kVariantCases[6]}) {
    SCOPED_TRACE(::testing::Message() << "H=" << c.heads << "/" << c.kv_heads << " T=" << c.tq << " window=" << c.left
                                      << "," << c.right << " sinks=" << c.sinks);
    torch::manual_seed(31);
    const torch::Tensor q0 = torch::randn({1, c.heads, c.tq, c.d}, torch::kFloat64);
    const torch::Tensor k0 = torch::randn({1, c.kv_heads, c.tk, c.d}, torch::kFloat64);
    const torch::Tensor v0 = torch::randn({1, c.kv_heads, c.tk, c.d}, torch::kFloat64);
    const torch::Tensor dout = torch::randn({1, c.heads, c.tq, c.d}, torch::kFloat64);
    Terms terms;
    SdpaOptions options = variant_options(c, terms, cuda);
    torch::Tensor sinks_gpu;
    if (c.sinks) {
      sinks_gpu = terms.sinks.to(cuda).requires_grad_();
      options.sinks(sinks_gpu);
      terms.sinks = terms.sinks.clone().requires_grad_();
    }
    // The reference sees the inputs rounded to dtype, as the GPU does.
    torch::Tensor q = q0.to(dtype).to(torch::kFloat64).requires_grad_(), k = k0.to(dtype).to(torch::kFloat64).requires_grad_();
    torch::Tensor v = v0.to(dtype).to(torch::kFloat64).requires_grad_();
    auto [allowed, positions] = dense_band(c);
    torch::Tensor expected = std::get<0>(float64_reference(q, k, v, allowed, positions, 1.0 / std::sqrt(double(c.d)), terms));
    (expected * dout).sum().backward();

    torch::Tensor qg = q0.to(cuda).requires_grad_(), kg = k0.to(cuda).requires_grad_(), vg = v0.to(cuda).requires_grad_();
    EXPECT_EQ(resolved_backend(qg, kg, vg, options), Backend::Fused);
    const torch::Tensor out = scaled_dot_product_attention(qg, kg, vg, options);
    (out.to(torch::kFloat64) * dout.to(torch::kCUDA)).sum().backward();
    // Gradients sum over many rounded products: twice the output's tolerance.
    const double tol = 2 * tolerance(dtype);
    EXPECT_CLOSE(qg.grad(), q.grad(), tol);
    EXPECT_CLOSE(kg.grad(), k.grad(), tol);
    EXPECT_CLOSE(vg.grad(), v.grad(), tol);
    if (c.sinks) EXPECT_CLOSE(sinks_gpu.grad(), terms.sinks.grad(), tol);
  }
}

// Soft-capping on attn's own kernel has no backward: with gradients the call takes the math backend.
TEST_P(CudaVariants, SoftcapWithGradientsTakesTheMathBackend) {
  const auto cuda = torch::TensorOptions().device(torch::kCUDA).dtype(GetParam());
  const torch::Tensor q = torch::randn({1, 2, 64, 64}, cuda).requires_grad_();
  const SdpaOptions options = SdpaOptions().causal(true).softcap(30.0);
  EXPECT_EQ(resolved_backend(q, q, q, options), Backend::Math);
  EXPECT_ERROR_CONTAINS(scaled_dot_product_attention(q, q, q, SdpaOptions(options).backend(Backend::Fused)),
                        "has no backward");
  torch::NoGradGuard no_grad;
  EXPECT_EQ(describe_route(q, q, q, options), "fused (cuda:attn)");
}

INSTANTIATE_TEST_SUITE_P(Dtypes, CudaVariants, ::testing::Values(torch::kFloat16, torch::kBFloat16),
                         [](const auto& info) { return std::string(c10::toString(info.param)); });

// Packed sequences go to FlashAttention-2's varlen kernel, each with its own bottom-right diagonal.
TEST(CudaVarlen, PackedSequencesMatchFloat64DefinitionOfEach) {
  if (skip_without_gpu()) GTEST_SKIP() << "CUDA is not available: skipping packed sequences on CUDA";
  const auto cuda = torch::TensorOptions().device(torch::kCUDA).dtype(torch::kBFloat16);
  const std::vector<int64_t> lq{100, 1, 257, 64}, lk{130, 1, 257, 90};
  const int64_t H = 4, H_kv = 2, d = 64;
  std::vector<int64_t> cq{0}, ck{0};
  for (size_t s = 0; s < lq.size(); ++s) cq.push_back(cq.back() + lq[s]), ck.push_back(ck.back() + lk[s]);
  torch::manual_seed(5);
  const torch::Tensor q = torch::randn({cq.back(), H, d}, cuda), k = torch::randn({ck.back(), H_kv, d}, cuda);
  const torch::Tensor v = torch::randn({ck.back(), H_kv, d}, cuda);
  Terms terms;
  terms.sinks = torch::randn({H}, torch::kFloat64);
  const SdpaOptions options = SdpaOptions().causal(true).window(40, -1).sinks(terms.sinks.to(cuda));
  const torch::Tensor out =
      varlen_attention(q, k, v, longs(cq), longs(ck), 257, 257, options);
  for (size_t s = 0; s < lq.size(); ++s) {
    SCOPED_TRACE(::testing::Message() << "sequence " << s);
    const VariantCase c{H, H_kv, lq[s], lk[s], d, true, CausalAlignment::BottomRight, 40, -1, 0.0, false, true, ""};
    auto [allowed, positions] = dense_band(c);
    const auto one = [&](const torch::Tensor& x, const std::vector<int64_t>& cu) {
      return x.narrow(0, cu[s], cu[s + 1] - cu[s]).transpose(0, 1).unsqueeze(0);
    };
    const torch::Tensor expected =
        std::get<0>(float64_reference(one(q, cq), one(k, ck), one(v, ck), allowed, positions, 1.0 / 8.0, terms));
    EXPECT_CLOSE(one(out, cq), expected, tolerance(torch::kBFloat16));
  }
}

// ---------------------------------------------------------------------------------------------------------
// Ring attention over NCCL, on the one GPU there is: the group forms, a collective runs, and a one-rank ring
// (its blocks on the CUDA kernels, forward and backward) equals attention over the whole sequence.

TEST(CudaRingAttention, OneRankOverNcclMatchesFloat64Definition) {
  if (skip_without_gpu()) GTEST_SKIP() << "CUDA is not available: skipping ring attention over NCCL";
  ASSERT_TRUE(distributed::nccl_available()) << "a CUDA build of attn must have make_nccl_group";
  const auto store = c10::make_intrusive<c10d::HashStore>();
  const auto group = distributed::make_nccl_group(0, 1, store, 0);
  torch::Tensor x = torch::ones({4}, torch::TensorOptions().device(torch::kCUDA));
  std::vector<torch::Tensor> tensors{x};
  group->allreduce(tensors)->wait();
  EXPECT_TRUE(torch::equal(x.cpu(), torch::ones({4})));

  const auto cuda = torch::TensorOptions().device(torch::kCUDA).dtype(torch::kBFloat16);
  torch::manual_seed(17);
  const int64_t T = 384, d = 64;
  const torch::Tensor q0 = torch::randn({1, 4, T, d}, torch::kFloat64), k0 = torch::randn({1, 2, T, d}, torch::kFloat64);
  const torch::Tensor v0 = torch::randn({1, 2, T, d}, torch::kFloat64), dout = torch::randn({1, 4, T, d}, torch::kFloat64);
  const auto layout = distributed::SequenceLayout::Zigzag;
  const auto shard = [&](const torch::Tensor& t) { return distributed::shard_sequence(t, 2, 0, 1, layout); };
  torch::Tensor q = shard(q0.to(cuda)).requires_grad_(), k = shard(k0.to(cuda)).requires_grad_();
  torch::Tensor v = shard(v0.to(cuda)).requires_grad_();
  const torch::Tensor out_shard =
      distributed::ring_attention(q, k, v, group, distributed::RingAttentionOptions().is_causal(true));
  const torch::Tensor out = distributed::unshard_sequence({out_shard}, 2, layout);
  (out.to(torch::kFloat64) * dout.to(torch::kCUDA)).sum().backward();

  torch::Tensor qr = q0.to(torch::kBFloat16).to(torch::kFloat64).requires_grad_();
  torch::Tensor kr = k0.to(torch::kBFloat16).to(torch::kFloat64).requires_grad_();
  torch::Tensor vr = v0.to(torch::kBFloat16).to(torch::kFloat64).requires_grad_();
  const torch::Tensor allowed = torch::ones({T, T}, torch::kBool).tril().view({1, 1, T, T});
  const torch::Tensor expected =
      std::get<0>(float64_reference(qr, kr, vr, allowed, torch::arange(T).view({1, T}), 1.0 / 8.0, Terms{}));
  (expected * dout).sum().backward();
  EXPECT_CLOSE(out, expected, tolerance(torch::kBFloat16));
  const auto whole = [&](const torch::Tensor& g) { return distributed::unshard_sequence({g}, 2, layout); };
  EXPECT_CLOSE(whole(q.grad()), qr.grad(), 2 * tolerance(torch::kBFloat16));
  EXPECT_CLOSE(whole(k.grad()), kr.grad(), 2 * tolerance(torch::kBFloat16));
  EXPECT_CLOSE(whole(v.grad()), vr.grad(), 2 * tolerance(torch::kBFloat16));
}

}  // namespace
}  // namespace attn::test
