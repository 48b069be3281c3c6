// attn::ops::linear_rows, the few-row linear kernel of a decoding step, under every instruction-set variant in
// float32 and bfloat16, and attn::linear, the front door that chooses it. The reference is at::linear in
// float64 on the same inputs (rounded to the dtype under test first), so only the kernel's own sums and the
// final rounding separate the two.

#include "kernel_variants.h"
#include "ops/cpu/isa/capability.h"
#include "ops/cpu/products/route.h"
#include "ops/torch_bfloat16_gemm.h"
#include "support.h"

#include <attn/cpu_kernel_info.h>
#include <attn/functional.h>
#include <attn/ops/linear_rows.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace attn::test {
namespace {

class LinearRowsKernel : public KernelVariantTest {
 protected:
  torch::Dtype dtype() const { return GetParam().dtype; }

  /// y against at::linear in float64 on the same (rounded) inputs: float32 sums differ from float64's by
  /// rounding only; bfloat16's result is additionally rounded once to 8 bits of mantissa.
  void expect_matches_float64(const torch::Tensor& y, const torch::Tensor& x, const torch::Tensor& w,
                              const torch::Tensor& b, const std::string& what) const {
    const torch::Tensor ref = at::linear(x.to(torch::kFloat64), w.to(torch::kFloat64),
                                         b.defined() ? b.to(torch::kFloat64) : torch::Tensor());
    ASSERT_EQ(y.scalar_type(), x.scalar_type()) << what;
    ASSERT_EQ(y.sizes(), ref.sizes()) << what;
    const bool bf16 = dtype() == torch::kBFloat16;
    EXPECT_TRUE(torch::allclose(y.to(torch::kFloat64), ref, bf16 ? 1.0 / 256 : 1e-5, bf16 ? 1e-3 : 1e-4))
        << what << ": max |y - ref| = " << (y.to(torch::kFloat64) - ref).abs().max().item<double>();
  }
};

TEST_P(LinearRowsKernel, MatchesFloat64AcrossRowsWidthsAndBias) {
  torch::manual_seed(11);
  // Widths below, at and across the vector lengths (8 and 16 floats, 32 bfloat16s), with and without a remainder
  // of whole vectors (56), plus a model's.
  for (int64_t in : {1, 7, 16, 33, 56, 64, 100, 576}) {
    for (int64_t out : {1, 5, 300}) {
      for (int64_t rows = 1; rows <= ops::kLinearRowsMax; ++rows) {
        const torch::Tensor x = torch::randn({rows, in}).to(dtype());
        const torch::Tensor w = torch::randn({out, in}).to(dtype());
        const torch::Tensor b = torch::randn({out}).to(dtype());
        const std::string what = "in " + std::to_string(in) + ", out " + std::to_string(out) + ", rows " +
                                 std::to_string(rows);
        expect_matches_float64(ops::linear_rows(x, w, b), x, w, b, what + ", bias");
        expect_matches_float64(ops::linear_rows(x, w), x, w, {}, what);
      }
    }
  }
}

TEST_P(LinearRowsKernel, KeepsTheInputsLeadingDimensions) {
  torch::manual_seed(12);
  const torch::Tensor w = torch::randn({9, 20}).to(dtype());
  for (const std::vector<int64_t>& lead : std::vector<std::vector<int64_t>>{{}, {1}, {2, 1}, {1, 1, 3}, {2, 2}}) {
    std::vector<int64_t> sizes = lead;
    sizes.push_back(20);
    const torch::Tensor x = torch::randn(sizes).to(dtype());
    const torch::Tensor y = ops::linear_rows(x, w);
    sizes.back() = 9;
    EXPECT_EQ(y.sizes(), torch::IntArrayRef(sizes));
    expect_matches_float64(y, x, w, {}, "input " + c10::str(x.sizes()));
  }
}

TEST_P(LinearRowsKernel, ReadsStridedWeightsAndInputsWithoutChangingThem) {
  torch::manual_seed(13);
  // Rows of a wider matrix (row stride 50, not 37), a transposed matrix (columns of stride 37, copied first),
  // and a non-contiguous input (every other element).
  const torch::Tensor wide = torch::randn({64, 50}).to(dtype());
  const torch::Tensor slice = wide.narrow(1, 5, 37);
  const torch::Tensor transposed = torch::randn({37, 64}).to(dtype()).t();
  const torch::Tensor x = torch::randn({2, 74}).to(dtype()).slice(1, 0, 74, 2);
  const torch::Tensor wide_before = wide.clone(), transposed_before = transposed.clone(), x_before = x.clone();
  expect_matches_float64(ops::linear_rows(x, slice), x, slice, {}, "row-strided weight");
  expect_matches_float64(ops::linear_rows(x, transposed), x, transposed, {}, "transposed weight");
  EXPECT_TRUE(torch::equal(wide, wide_before));
  EXPECT_TRUE(torch::equal(transposed, transposed_before));
  EXPECT_TRUE(torch::equal(x, x_before));
}

TEST_P(LinearRowsKernel, EmptyShapes) {
  const torch::Tensor b = torch::randn({3}).to(dtype());
  // No rows: an empty result. No input features: the bias alone, or zeros.
  EXPECT_EQ(ops::linear_rows(torch::zeros({0, 4}, dtype()), torch::ones({3, 4}, dtype())).sizes(),
            torch::IntArrayRef({0, 3}));
  EXPECT_TRUE(torch::equal(ops::linear_rows(torch::zeros({2, 0}, dtype()), torch::ones({3, 0}, dtype()), b),
                           b.expand({2, 3})));
  EXPECT_TRUE(torch::equal(ops::linear_rows(torch::zeros({1, 0}, dtype()), torch::ones({3, 0}, dtype())),
                           torch::zeros({1, 3}, dtype())));
  EXPECT_EQ(ops::linear_rows(torch::zeros({1, 4}, dtype()), torch::ones({0, 4}, dtype())).sizes(),
            torch::IntArrayRef({1, 0}));
}

// linear_rows_many: each weight's result is at::linear's in float64, whatever the weights' sizes and order,
// with a bias on some and none on others. The widths make the threads' ranges cross from one weight into the
// next (a range is at least 2^15 weight elements) and leave weights shorter than one range.
TEST_P(LinearRowsKernel, ManyWeightsMatchFloat64EachAsAlone) {
  torch::manual_seed(18);
  for (int64_t in : {7, 64, 576}) {
    const std::vector<int64_t> outs{576, 1, 192, 64, 192};
    std::vector<torch::Tensor> w;
    c10::List<c10::optional<torch::Tensor>> b;
    for (size_t k = 0; k < outs.size(); ++k) {
      w.push_back(torch::randn({outs[k], in}).to(dtype()));
      b.push_back(k % 2 ? c10::optional<torch::Tensor>(torch::randn({outs[k]}).to(dtype())) : c10::nullopt);
    }
    for (int64_t rows : {1, 3, 16}) {
      const torch::Tensor x = torch::randn({rows, 1, in}).to(dtype());
      const std::vector<torch::Tensor> ys = ops::linear_rows_many(x, w, b);
      ASSERT_EQ(ys.size(), outs.size());
      const std::vector<torch::Tensor> unbiased = ops::linear_rows_many(x, w);
      for (size_t k = 0; k < outs.size(); ++k) {
        const std::string what = "in " + std::to_string(in) + ", rows " + std::to_string(rows) + ", weights[" +
                                 std::to_string(k) + "]";
        const torch::Tensor bias = b.get(k) ? *b.get(k) : torch::Tensor();
        expect_matches_float64(ys[k], x, w[k], bias, what);
        expect_matches_float64(unbiased[k], x, w[k], {}, what + ", no biases");
      }
    }
  }
}

// The weights' prefetch (chosen per call by the CPU's vendor and the row count, products/route.h) asks for lines
// only: with it and without, every row count gives the same bits, and both match float64. The widths cover the
// prefetching loops (two vectors a step) with and without their remainders.
TEST_P(LinearRowsKernel, PrefetchedOrNotTheSameBits) {
  torch::manual_seed(20);
  for (int64_t in : {64, 100, 576}) {
    const torch::Tensor w = torch::randn({300, in}).to(dtype());
    const torch::Tensor b = torch::randn({300}).to(dtype());
    for (int64_t rows = 1; rows <= ops::kLinearRowsMax; ++rows) {
      const torch::Tensor x = torch::randn({rows, in}).to(dtype());
      ops::cpu::force_weight_prefetch(true);
      const torch::Tensor prefetched = ops::linear_rows(x, w, b);
      ops::cpu::force_weight_prefetch(false);
      const torch::Tensor plain = ops::linear_rows(x, w, b);
      ops::cpu::reset_weight_prefetch();
      const std::string what = "in " + std::to_string(in) + ", rows " + std::to_string(rows);
      EXPECT_TRUE(torch::equal(prefetched, plain)) << what;
      expect_matches_float64(prefetched, x, w, b, what + ", prefetched");
    }
  }
}

TEST(LinearRowsRoute, PrefetchesWeightsExceptFewRowsOnAmd) {
  const bool amd = ops::cpu::hardware_is_amd();
  std::printf("[ info ] this CPU is %s: up to %lld rows %s their weights\n", amd ? "AMD's" : "not AMD's",
              static_cast<long long>(ops::cpu::kAmdUnprefetchedRows), amd ? "stream without prefetching" : "prefetch");
  for (int64_t rows = 1; rows <= ops::kLinearRowsMax; ++rows) {
    EXPECT_EQ(ops::cpu::linear_rows_prefetch_weights(rows), !amd || rows > ops::cpu::kAmdUnprefetchedRows) << rows;
  }
  ops::cpu::force_weight_prefetch(true);
  EXPECT_TRUE(ops::cpu::linear_rows_prefetch_weights(1));
  ops::cpu::force_weight_prefetch(false);
  EXPECT_FALSE(ops::cpu::linear_rows_prefetch_weights(4));
  ops::cpu::reset_weight_prefetch();
}

TEST_P(LinearRowsKernel, ManyWeightsReadStridedAndEmptyWeights) {
  torch::manual_seed(19);
  const torch::Tensor wide = torch::randn({64, 50}).to(dtype());
  const torch::Tensor slice = wide.narrow(1, 5, 37), transposed = torch::randn({37, 20}).to(dtype()).t();
  const torch::Tensor empty = torch::randn({0, 37}).to(dtype());
  const torch::Tensor wide_before = wide.clone();
  const torch::Tensor x = torch::randn({2, 37}).to(dtype());
  const std::vector<torch::Tensor> ys = ops::linear_rows_many(x, {slice, empty, transposed});
  ASSERT_EQ(ys.size(), 3u);
  expect_matches_float64(ys[0], x, slice, {}, "rows of a wider matrix");
  EXPECT_EQ(ys[1].sizes(), torch::IntArrayRef({2, 0}));
  expect_matches_float64(ys[2], x, transposed, {}, "a transposed matrix");
  EXPECT_TRUE(torch::equal(wide, wide_before));
}

/// Every variant × the op's two dtypes, bfloat16 on AVX512-BF16's pair products, and bfloat16 on AMX's tiles
/// (from ops::cpu::kAmxLinearMinRows rows; fewer stay on the pairs).
std::vector<KernelParam> linear_grid() {
  std::vector<KernelParam> grid;
  for (auto c : {ops::cpu::Capability::Default, ops::cpu::Capability::Avx2, ops::cpu::Capability::Avx512}) {
    for (torch::Dtype d : {torch::kFloat32, torch::kBFloat16}) grid.push_back({c, d});
  }
  grid.push_back({ops::cpu::Capability::Avx512Bf16, torch::kBFloat16});  // bfloat16 pairs (AVX512-BF16)
  grid.push_back({ops::cpu::Capability::Avx512Bf16, torch::kBFloat16, ops::cpu::FloatProducts::Tiles, true});
  return grid;
}

INSTANTIATE_TEST_SUITE_P(Variants, LinearRowsKernel, ::testing::ValuesIn(linear_grid()), kernel_param_name);

TEST(LinearRowsErrors, NameTheArgumentAndShapes) {
  const torch::Tensor w = torch::randn({3, 4});
  EXPECT_ERROR_CONTAINS(ops::linear_rows(torch::randn({17, 4}), w), "at most 16 rows");
  EXPECT_ERROR_CONTAINS(ops::linear_rows(torch::randn({1, 5}), w), "input must be [..., in_features] = [..., 4]");
  EXPECT_ERROR_CONTAINS(ops::linear_rows(torch::randn({1, 4}), torch::randn({3, 4, 1})),
                        "weight must be [out_features, in_features]");
  EXPECT_ERROR_CONTAINS(ops::linear_rows(torch::randn({1, 4}), w, torch::randn({4})),
                        "bias must be [out_features] = [3]");
  EXPECT_ERROR_CONTAINS(ops::linear_rows(torch::randn({1, 4}, torch::kFloat64), w.to(torch::kFloat64)),
                        "float32 or bfloat16");
  EXPECT_ERROR_CONTAINS(ops::linear_rows(torch::randn({1, 4}), w.to(torch::kBFloat16)),
                        "weight must have input's dtype");
  EXPECT_ERROR_CONTAINS(ops::linear_rows(torch::randn({1, 4}), torch::Tensor()), "must be defined");
}

TEST(LinearRowsErrors, ManyNameTheWeightAndItsShape) {
  const torch::Tensor x = torch::randn({1, 4});
  const torch::Tensor w = torch::randn({3, 4});
  const auto none = [](size_t n) {
    c10::List<c10::optional<torch::Tensor>> b;
    for (size_t i = 0; i < n; ++i) b.push_back(c10::nullopt);
    return b;
  };
  EXPECT_ERROR_CONTAINS(ops::linear_rows_many(x, {}), "attn::linear_rows_many: weights must hold at least one weight");
  EXPECT_ERROR_CONTAINS(ops::linear_rows_many(x, {w, torch::randn({2, 5})}),
                        "attn::linear_rows_many: input must be [..., in_features] = [..., 5] to match weights[1] [2, 5]");
  EXPECT_ERROR_CONTAINS(ops::linear_rows_many(x, {w, w}, none(1)),
                        "biases must be empty or hold one entry (a tensor or None) per weight: 2, got 1");
  c10::List<c10::optional<torch::Tensor>> wrong = none(2);
  wrong.set(1, torch::randn({4}));
  EXPECT_ERROR_CONTAINS(ops::linear_rows_many(x, {w, w}, wrong), "biases[1] must be [out_features] = [3], got [4]");
  EXPECT_ERROR_CONTAINS(ops::linear_rows_many(x, {w, w.to(torch::kBFloat16)}), "weights[1] must have input's dtype");
  EXPECT_ERROR_CONTAINS(ops::linear_rows_many(torch::randn({17, 4}), {w}), "at most 16 rows");
  EXPECT_ERROR_CONTAINS(ops::linear_rows_many(x, {w, torch::Tensor()}), "weights[1] must be a defined tensor");
  // Refused when a gradient would be needed, like linear_rows.
  EXPECT_ERROR_CONTAINS(ops::linear_rows_many(x, {w, torch::randn({2, 4}).requires_grad_()}),
                        "attn::linear_rows_many is an inference kernel and computes no gradient");
}

// attn::linear: the front door chooses linear_rows for a few rows without gradients, and at::linear otherwise;
// either way the result is at::linear's in float64.
TEST(Linear, EveryRouteMatchesFloat64) {
  torch::manual_seed(14);
  const torch::Tensor w = torch::randn({40, 24}), b = torch::randn({40});
  const auto ref = [&](const torch::Tensor& x) {
    return at::linear(x.to(torch::kFloat64), w.to(torch::kFloat64), b.to(torch::kFloat64));
  };
  for (int64_t rows : {1, 3, 4, 5, 17}) {
    const torch::Tensor x = torch::randn({rows, 24});
    EXPECT_TRUE(torch::allclose(attn::linear(x, w, b).to(torch::kFloat64), ref(x), 1e-5, 1e-4)) << rows << " rows";
  }
  const torch::Tensor x64 = torch::randn({1, 24}, torch::kFloat64);
  EXPECT_TRUE(torch::allclose(attn::linear(x64, w.to(torch::kFloat64), b.to(torch::kFloat64)), ref(x64), 1e-12, 1e-12));
}

TEST(Linear, GradientsFlowWhenRecorded) {
  // One float32 row with a weight that requires grad: the kernel is not differentiable, so attn::linear must
  // take at::linear, and d(Σ y·g)/dW = gᵀx, d/db = g, d/dx = g W.
  torch::manual_seed(15);
  const torch::Tensor w = torch::randn({6, 5}).requires_grad_(), b = torch::randn({6}).requires_grad_();
  const torch::Tensor x = torch::randn({1, 5}).requires_grad_();
  const torch::Tensor g = torch::randn({1, 6});
  (attn::linear(x, w, b) * g).sum().backward();
  const torch::Tensor g64 = g.to(torch::kFloat64), x64 = x.detach().to(torch::kFloat64);
  EXPECT_TRUE(torch::allclose(w.grad().to(torch::kFloat64), g64.t().mm(x64), 1e-5, 1e-5));
  EXPECT_TRUE(torch::allclose(b.grad().to(torch::kFloat64), g64.squeeze(0), 1e-6, 1e-6));
  EXPECT_TRUE(torch::allclose(x.grad().to(torch::kFloat64), g64.mm(w.detach().to(torch::kFloat64)), 1e-5, 1e-5));
  // Without recording (inference), the same call runs the kernel and its result carries no graph.
  torch::NoGradGuard no_grad;
  EXPECT_FALSE(attn::linear(x, w, b).requires_grad());
}

/// The flags /proc/cpuinfo lists, read here apart from attn's own detection; nullopt where there is none.
c10::optional<std::set<std::string>> cpuinfo_flags() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("flags", 0) != 0) continue;
    std::istringstream words(line.substr(line.find(':') + 1));
    return std::set<std::string>{std::istream_iterator<std::string>(words), std::istream_iterator<std::string>()};
  }
  return c10::nullopt;
}

/// Whether /proc/cpuinfo lists AVX-512's core set (F, BW, VL, DQ); nullopt where there is no /proc/cpuinfo.
c10::optional<bool> cpuinfo_lists_avx512_core() {
  const c10::optional<std::set<std::string>> flags = cpuinfo_flags();
  if (!flags) return c10::nullopt;
  return flags->count("avx512f") && flags->count("avx512bw") && flags->count("avx512vl") && flags->count("avx512dq");
}

// bfloat16 at every row count and width, on whichever route this CPU takes: the kernel, LibTorch's bfloat16
// GEMM (CPUs with AVX-512) or the float GEMM on widened inputs (x86 without it). Each is at::linear in float64
// on the same bfloat16 inputs, within 2^-7 relative and 0.01 absolute: rounding the result to bfloat16 costs
// at most 2^-9 relative; a wrong sum or a dropped bias costs far more.
TEST(Linear, Bfloat16MatchesFloat64AtEveryRowCount) {
  torch::manual_seed(16);
  for (int64_t in : {24, 2048}) {
    const torch::Tensor w = (torch::randn({40, in}) / std::sqrt(in)).to(torch::kBFloat16);
    const torch::Tensor b = torch::randn({40}).to(torch::kBFloat16);
    for (int64_t rows : {1, 4, 16, 17, 64}) {
      const torch::Tensor x = torch::randn({rows, in}).to(torch::kBFloat16);
      const torch::Tensor ref = at::linear(x.to(torch::kFloat64), w.to(torch::kFloat64), b.to(torch::kFloat64));
      const torch::Tensor y = attn::linear(x, w, b);
      ASSERT_EQ(y.scalar_type(), torch::kBFloat16);
      EXPECT_TRUE(torch::allclose(y.to(torch::kFloat64), ref, 1.0 / 128, 1e-2))
          << rows << " rows of " << in << ": max |y - ref| = " << (y.to(torch::kFloat64) - ref).abs().max().item<double>();
    }
  }
}

TEST(Linear, Bfloat16GradientsMatchFloat64) {
  // 32 rows with gradients recorded: LibTorch's bfloat16 product, or the widened float one, differentiated.
  torch::manual_seed(17);
  const torch::Tensor w = (torch::randn({12, 48}) / 7).to(torch::kBFloat16).requires_grad_();
  const torch::Tensor b = torch::randn({12}).to(torch::kBFloat16).requires_grad_();
  const torch::Tensor x = torch::randn({32, 48}).to(torch::kBFloat16).requires_grad_();
  const torch::Tensor g = torch::randn({32, 12}).to(torch::kBFloat16);
  const torch::Tensor y = attn::linear(x, w, b);
  ASSERT_EQ(y.scalar_type(), torch::kBFloat16);
  (y.to(torch::kFloat32) * g.to(torch::kFloat32)).sum().backward();
  const torch::Tensor g64 = g.to(torch::kFloat64), x64 = x.detach().to(torch::kFloat64);
  const torch::Tensor w64 = w.detach().to(torch::kFloat64);
  const auto close = [](const torch::Tensor& got, const torch::Tensor& want) {
    return torch::allclose(got.to(torch::kFloat64), want, 1.0 / 128, 5e-2);
  };
  EXPECT_EQ(w.grad().scalar_type(), torch::kBFloat16);
  EXPECT_TRUE(close(w.grad(), g64.t().mm(x64)));
  EXPECT_TRUE(close(b.grad(), g64.sum(0)));
  EXPECT_TRUE(close(x.grad(), g64.mm(w64)));
}

// cpu_kernel_info() names the bfloat16 product beyond the kernel's rows as widened where the CPU lacks AVX-512's
// core set (what LibTorch asks for), as widened from kWidenedGemmMinRows rows where it has AVX512-BF16 measured
// slower than the float FMA and no AMX, and as LibTorch's bfloat16 GEMM elsewhere: /proc/cpuinfo read here.
TEST(Linear, Bfloat16RouteFollowsTheCpusAvx512) {
  const c10::optional<std::set<std::string>> flags = cpuinfo_flags();
  ASSERT_TRUE(flags.has_value()) << "no flags line in /proc/cpuinfo";
  const bool avx512 = *cpuinfo_lists_avx512_core();
  const double speed = ops::cpu::bf16_pair_speed();
  // Linux lists amx_tile only where it enabled the tile state.
  bool trails = avx512 && flags->count("avx512_bf16") && !flags->count("amx_tile") && speed > 0 &&
                speed < ops::kBfloat16GemmTrailsBelow;
  const char* forced = std::getenv("ATTN_BF16_GEMM");
  if (forced && std::string(forced) == "widen") trails = avx512;
  if (forced && std::string(forced) == "native") trails = false;
  const CpuKernelInfo info = cpu_kernel_info();
  EXPECT_EQ(info.bfloat16_linear, !avx512 ? "widened" : trails ? "widened_many" : "libtorch")
      << info.summary << " (pairs measured " << speed << "x)";
  EXPECT_EQ(info.summary.find("widened to float GEMM") != std::string::npos, !avx512 || trails) << info.summary;
  if (trails) EXPECT_NE(info.summary.find("128 or more rows"), std::string::npos) << info.summary;
}

/// Forces whether LibTorch's bfloat16 GEMM counts as trailing the float one, for a scope.
struct TrailsScope {
  explicit TrailsScope(bool trails) { ops::force_torch_bfloat16_gemm_trails_float(trails); }
  ~TrailsScope() { ops::reset_torch_bfloat16_gemm_trails_float(); }
};

/// What attn::linear gives for bfloat16 where it does not widen in blocks: LibTorch's bfloat16 product, or on x86
/// without AVX-512 (no bfloat16 GEMM in LibTorch) the float one, rounded once.
torch::Tensor unwidened_reference(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& b) {
  if (ops::torch_multiplies_bfloat16_natively()) return at::linear(x, w, b);
  return at::linear(x.to(torch::kFloat32), w.to(torch::kFloat32), b.to(torch::kFloat32)).to(torch::kBFloat16);
}

// Widened for the float GEMM a block of output features at a time (forced on, so every CPU runs it). Each result
// is at::linear's in float64 on the same bfloat16 inputs, with and without a bias, for a 3-D input, a transposed
// weight, an x with strided rows and a strided bias, and the inputs are left as they were:
//   600 features of 4096: blocks of 256 (4 MiB of float), the last one short; 128 and 150 rows;
//   100 features of 64 over 16400 rows: blocks of 64 features (the least, whose result then takes 4 MiB or more);
//   0 features.
// At 128 rows of 4096 it is bit for bit at::addmm in float on each block of 256 features, rounded to bfloat16:
// the product really was widened. A first call under InferenceMode, on a thread of its own, leaves the buffers
// that thread keeps usable outside it. Forced off, and below kWidenedGemmMinRows or with a gradient recorded
// even when forced on, attn::linear gives what it gives without the blocks, bit for bit.
TEST(Linear, Bfloat16WidenedInBlocksMatchesFloat64) {
  torch::manual_seed(23);
  const auto close = [](const torch::Tensor& y, const torch::Tensor& ref) {
    return y.scalar_type() == torch::kBFloat16 && y.sizes() == ref.sizes() &&
           torch::allclose(y.to(torch::kFloat64), ref, 1.0 / 128, 1e-2);
  };
  struct Case {
    int64_t features, in;
    std::vector<std::vector<int64_t>> shapes;  // of x
  };
  const std::vector<Case> cases = {
      {600, 4096, {{ops::kWidenedGemmMinRows, 4096}, {2, 75, 4096}}},
      {100, 64, {{16400, 64}}},
      {0, 64, {{ops::kWidenedGemmMinRows, 64}}},
  };
  const torch::Tensor w = (torch::randn({600, 4096}) / 64).to(torch::kBFloat16);
  const torch::Tensor b = torch::randn({600}).to(torch::kBFloat16);
  {
    TrailsScope widen(true);
    for (const Case& c : cases) {
      const torch::Tensor cw = (torch::randn({c.features, c.in}) / std::sqrt(c.in)).to(torch::kBFloat16);
      const torch::Tensor wt = cw.t().contiguous().t();  // the same values, column-major
      const torch::Tensor cb = torch::randn({2 * c.features}).to(torch::kBFloat16).slice(0, 0, 2 * c.features, 2);
      const torch::Tensor w64 = cw.to(torch::kFloat64), b64 = cb.to(torch::kFloat64);
      for (const std::vector<int64_t>& shape : c.shapes) {
        std::vector<int64_t> wider = shape;
        wider.back() += 8;
        const torch::Tensor x = torch::randn(shape).to(torch::kBFloat16);
        const torch::Tensor strided = torch::randn(wider).to(torch::kBFloat16).narrow(-1, 0, c.in);
        const torch::Tensor before = x.clone(), w_before = cw.clone();
        const torch::Tensor x64 = x.to(torch::kFloat64);
        const std::string what = std::to_string(x.numel() / std::max<int64_t>(c.in, 1)) + " rows of " +
                                 std::to_string(c.in) + ", " + std::to_string(c.features) + " features";
        EXPECT_TRUE(close(attn::linear(x, cw, cb), at::linear(x64, w64, b64))) << what << ", bias";
        EXPECT_TRUE(close(attn::linear(x, cw), at::linear(x64, w64))) << what;
        EXPECT_TRUE(close(attn::linear(x, wt, cb), at::linear(x64, w64, b64))) << what << ", transposed weight";
        EXPECT_TRUE(close(attn::linear(strided, cw, cb), at::linear(strided.to(torch::kFloat64), w64, b64)))
            << what << ", strided rows";
        EXPECT_TRUE(torch::equal(x, before) && torch::equal(cw, w_before)) << what << ": an input changed";
      }
    }
    const torch::Tensor x = torch::randn({ops::kWidenedGemmMinRows, 4096}).to(torch::kBFloat16);
    const torch::Tensor x32 = x.to(torch::kFloat32), b32 = b.to(torch::kFloat32);
    std::vector<torch::Tensor> blocks;
    for (int64_t first = 0; first < 600; first += 256) {
      const int64_t n = std::min<int64_t>(256, 600 - first);
      const torch::Tensor w32 = w.narrow(0, first, n).to(torch::kFloat32).contiguous();
      blocks.push_back(at::addmm(b32.narrow(0, first, n), x32, w32.t()).to(torch::kBFloat16));
    }
    const torch::Tensor widened = attn::linear(x, w, b), by_blocks = torch::cat(blocks, 1);
    EXPECT_TRUE(torch::equal(widened, by_blocks)) << (widened != by_blocks).sum().item<int64_t>() << " differ";

    torch::Tensor in_inference, without_grad;
    std::string error;
    std::thread fresh([&] {
      try {
        {
          c10::InferenceMode inference;
          in_inference = attn::linear(x, w, b);
        }
        torch::NoGradGuard no_grad;
        without_grad = attn::linear(x, w, b);
      } catch (const std::exception& e) {
        error = e.what();
      }
    });
    fresh.join();
    ASSERT_TRUE(error.empty()) << error.substr(0, 300);
    ASSERT_TRUE(in_inference.defined() && without_grad.defined());
    EXPECT_TRUE(torch::equal(in_inference, widened));
    EXPECT_TRUE(torch::equal(without_grad, widened));

    const torch::Tensor few = torch::randn({ops::kWidenedGemmMinRows - 1, 4096}).to(torch::kBFloat16);
    EXPECT_TRUE(torch::equal(attn::linear(few, w, b), unwidened_reference(few, w, b)));
    const torch::Tensor recorded = x.clone().requires_grad_();
    const torch::Tensor y = attn::linear(recorded, w, b);
    EXPECT_TRUE(y.requires_grad());
    EXPECT_TRUE(torch::equal(y, unwidened_reference(x, w, b)));
  }
  TrailsScope native(false);
  const torch::Tensor x = torch::randn({ops::kWidenedGemmMinRows, 4096}).to(torch::kBFloat16);
  EXPECT_TRUE(torch::equal(attn::linear(x, w, b), unwidened_reference(x, w, b)));
}

// cpu_kernel_info() names linear_rows' bfloat16 products as the route chooses them: AMX's tiles where the CPU has
// them and they are on, the pairs where it has AVX512-BF16 (and the tiles are off), widening elsewhere.
TEST(Linear, KernelInfoNamesTheBfloat16RowsProducts) {
  if (ops::cpu::hardware_capability_limit() != ops::cpu::Capability::Avx512Bf16) {
    std::printf("[ NOTE     ] this CPU has no AVX512-BF16: only the widened rows can run here\n");
    EXPECT_EQ(cpu_kernel_info().bfloat16_linear_rows, "widened");
    return;
  }
  if (amx_runs_here("the pairs and widening were checked")) {
    Bf16RouteScope amx(/*amx=*/true);
    EXPECT_EQ(cpu_kernel_info().bfloat16_linear_rows, "amx");
    EXPECT_NE(cpu_kernel_info().summary.find("linear rows on AMX tiles from"), std::string::npos)
        << cpu_kernel_info().summary;
    EXPECT_FALSE(ops::cpu::linear_rows_take_amx(at::kBFloat16, ops::cpu::kAmxLinearMinRows - 1));
    EXPECT_FALSE(ops::cpu::linear_rows_take_amx(at::kFloat, ops::cpu::kAmxLinearMinRows));
  }
  {
    Bf16RouteScope pairs(/*amx=*/false);
    EXPECT_EQ(cpu_kernel_info().bfloat16_linear_rows, "pairs");
    EXPECT_FALSE(ops::cpu::linear_rows_take_amx(at::kBFloat16, ops::kLinearRowsMax));
  }
  CapabilityScope widened(ops::cpu::Capability::Avx512);
  EXPECT_EQ(cpu_kernel_info().bfloat16_linear_rows, "widened");
}

// Where the CPU has AVX-512's core set but not AVX512-BF16 (/proc/cpuinfo read here), LibTorch's bfloat16 GEMM
// emulates bfloat16, so attn::linear multiplies up to kLinearRowsMax rows of any width on the kernel: bit for
// bit what ops::linear_rows gives (LibTorch's GEMM sums in another order: some of the 1024 outputs per row round
// to other bits). Elsewhere 2 to 16 rows of 4096 take LibTorch's GEMM or the widened one. On every CPU the
// result is at::linear's in float64, within Bfloat16MatchesFloat64AtEveryRowCount's bounds.
TEST(Linear, Bfloat16TakesTheKernelAtAnyWidthWhereLibTorchEmulatesBfloat16) {
  const c10::optional<std::set<std::string>> flags = cpuinfo_flags();
  ASSERT_TRUE(flags.has_value()) << "no flags line in /proc/cpuinfo";
  const bool emulated = *cpuinfo_lists_avx512_core() && !flags->count("avx512_bf16");
  torch::manual_seed(19);
  const torch::Tensor w = (torch::randn({1024, 4096}) / 64).to(torch::kBFloat16);
  for (int64_t rows : {2, 4, 16}) {
    const torch::Tensor x = torch::randn({rows, 4096}).to(torch::kBFloat16);
    const torch::Tensor y = attn::linear(x, w);
    const torch::Tensor ref = at::linear(x.to(torch::kFloat64), w.to(torch::kFloat64));
    EXPECT_TRUE(torch::allclose(y.to(torch::kFloat64), ref, 1.0 / 128, 1e-2)) << rows << " rows";
    if (emulated) {
      const torch::Tensor kernel = ops::linear_rows(x, w);
      EXPECT_TRUE(torch::equal(y, kernel)) << rows << " rows: " << (y != kernel).sum().item<int64_t>() << " differ";
    }
  }
}

// attn::linear_many: each result is at::linear's in float64 on every route, the kernel's one pass (a
// few rows, no gradient), separate products (more rows) and with gradients recorded, which must reach every
// weight.
TEST(Linear, ManyMatchesFloat64OnEveryRoute) {
  torch::manual_seed(20);
  const torch::Tensor gate = torch::randn({40, 24}), up = torch::randn({30, 24}), b = torch::randn({30});
  for (torch::Dtype dtype : {torch::kFloat32, torch::kBFloat16}) {
    for (int64_t rows : {1, 4, 17}) {
      const torch::Tensor x = torch::randn({rows, 24}).to(dtype);
      const std::vector<torch::Tensor> ys = attn::linear_many(x, {gate.to(dtype), up.to(dtype)}, {torch::Tensor(), b.to(dtype)});
      ASSERT_EQ(ys.size(), 2u);
      const torch::Tensor x64 = x.to(torch::kFloat64);
      const double rtol = dtype == torch::kBFloat16 ? 1.0 / 128 : 1e-5, atol = dtype == torch::kBFloat16 ? 1e-2 : 1e-4;
      EXPECT_TRUE(torch::allclose(ys[0].to(torch::kFloat64), at::linear(x64, gate.to(dtype).to(torch::kFloat64)), rtol, atol))
          << rows << " rows, gate";
      EXPECT_TRUE(torch::allclose(ys[1].to(torch::kFloat64),
                                  at::linear(x64, up.to(dtype).to(torch::kFloat64), b.to(dtype).to(torch::kFloat64)),
                                  rtol, atol))
          << rows << " rows, up with its bias";
    }
  }
  const torch::Tensor w0 = gate.clone().requires_grad_(), w1 = up.clone().requires_grad_();
  const torch::Tensor x = torch::randn({1, 24});
  const std::vector<torch::Tensor> ys = attn::linear_many(x, {w0, w1});
  (ys[0].sum() + 2 * ys[1].sum()).backward();
  const torch::Tensor x64 = x.to(torch::kFloat64);
  EXPECT_TRUE(torch::allclose(w0.grad().to(torch::kFloat64), x64.expand({40, 24}), 1e-6, 1e-6));
  EXPECT_TRUE(torch::allclose(w1.grad().to(torch::kFloat64), 2 * x64.expand({30, 24}), 1e-6, 1e-6));
}

TEST(Linear, FrontDoorErrors) {
  EXPECT_ERROR_CONTAINS(attn::linear_many(torch::randn({1, 4}), {}),
                        "attn::linear_many: weights must hold at least one weight");
  EXPECT_ERROR_CONTAINS(attn::linear_many(torch::randn({1, 4}), {torch::randn({3, 4}), torch::randn({2, 5})}),
                        "attn::linear_many: input must be [..., in_features] = [..., 5] to match weights[1] [2, 5]");
  EXPECT_ERROR_CONTAINS(attn::linear_many(torch::randn({1, 4}), {torch::randn({3, 4})}, {torch::randn({3}), torch::randn({3})}),
                        "attn::linear_many: biases must be empty or hold one entry");
  EXPECT_ERROR_CONTAINS(attn::linear_many(torch::randn({1, 4}), {torch::randn({3, 4})}, {torch::randn({2})}),
                        "attn::linear_many: biases[0] must be [out_features] = [3], got [2]");
  EXPECT_ERROR_CONTAINS(attn::linear(torch::randn({1, 5}), torch::randn({3, 4})),
                        "attn::linear: input must be [..., in_features] = [..., 4]");
  EXPECT_ERROR_CONTAINS(attn::linear(torch::randn({1, 4}), torch::randn({3, 4}), torch::randn({2})),
                        "attn::linear: bias must be [out_features] = [3]");
}

}  // namespace
}  // namespace attn::test
