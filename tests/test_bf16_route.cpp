// The bfloat16 route (Capability::Avx512Bf16): its micro-kernel and packing against float64 products of the
// same rounded inputs, and the route's choice. The fused kernel's results on the route, for every mask kind
// and shape, are checked in test_fused.cpp (the avx512_bf16 variant of FusedKernel).

#include "kernel_variants.h"
#include "support.h"
#include "ops/cpu/kernels.h"
#include "ops/cpu/math/exp_polynomial.h"
#ifdef ATTN_HAVE_BF16_DOT
#include "ops/cpu/products/bf16_pairs.h"
#include "ops/cpu/products/bf16_softmax.h"
#endif
#ifdef ATTN_HAVE_AMX
#include "ops/cpu/products/amx_panels.h"
#endif

#include <attn/attn.h>
#include <attn/ops/flash_attention.h>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <string>
#include <utility>
#include <vector>

namespace attn::test {
namespace {

using ops::cpu::Capability;

bool cpu_has_bf16_route() { return ops::cpu::hardware_capability_limit() == Capability::Avx512Bf16; }

/// On a CPU without AVX512-BF16, says so (the route's own kernels cannot run here), checks that the route is
/// never taken, and returns true. Where the CPU has it but ATTN_CPU_CAPABILITY lowered the kernels, the test
/// fails too: a case is left out only for missing hardware.
bool skip_without_bf16_route() {
  if (cpu_has_bf16_route()) return false;
  EXPECT_FALSE(ops::cpu::hardware_has_avx512_core() && ops::cpu::hardware_has_avx512_bf16())
      << "this CPU has AVX512-BF16, but ATTN_CPU_CAPABILITY lowered the kernels below it: the route's cases cannot run";
  std::printf("[ NOTE     ] this CPU has no AVX512-BF16: the route's kernels cannot run here (it is never taken)\n");
  EXPECT_FALSE(cpu_kernel_info().bfloat16_route);
  return true;
}

/// bfloat16's own routes that this CPU runs, as Bf16RouteScope's `amx`: the pairs, and AMX's tiles where it has
/// them (saying so where it has not).
std::vector<bool> own_routes() {
  if (amx_runs_here("only the pairs route was checked")) return {false, true};
  return {false};
}

TEST(Bf16Route, KernelInfoSaysWhichRouteRunsAndWhy) {
  const CpuKernelInfo info = cpu_kernel_info();
  EXPECT_EQ(info.bfloat16_route, info.variant == "avx512_bf16");
  EXPECT_NE(info.summary.find(info.variant), std::string::npos) << info.summary;
  if (!cpu_has_bf16_route()) {
    EXPECT_FALSE(info.bfloat16_route);
    EXPECT_NE(info.summary.find("no AVX512-BF16"), std::string::npos) << info.summary;
    return;
  }
  // Measured at first use, unless ATTN_CPU_CAPABILITY=avx512_bf16 asked for the route outright; the route
  // runs exactly when the measurement favoured it.
  if (info.bfloat16_pair_speed > 0 && !info.amx_tiles) {
    EXPECT_EQ(info.bfloat16_route, info.bfloat16_pair_speed >= ops::cpu::kBf16RouteMargin) << info.summary;
    EXPECT_NE(info.summary.find("measured"), std::string::npos) << info.summary;
  }
  CapabilityScope forced(Capability::Avx512Bf16);
  EXPECT_TRUE(cpu_kernel_info().bfloat16_route);
  CapabilityScope off(Capability::Avx512);
  EXPECT_FALSE(cpu_kernel_info().bfloat16_route);
  EXPECT_EQ(cpu_kernel_info().variant, "avx512");
}

// The float products: attn's tiles on the AVX-512 variant unless forced to BLAS; BLAS on the others.
TEST(FloatProducts, KernelInfoSaysWhichProductsRun) {
  {
    CapabilityScope avx2(Capability::Avx2);
    EXPECT_EQ(cpu_kernel_info().float_products, "blas");
  }
  if (ops::cpu::hardware_capability_limit() < Capability::Avx512) {
    std::printf("[ NOTE     ] this CPU has no AVX-512: the float tiles cannot run here\n");
    return;
  }
  CapabilityScope avx512(Capability::Avx512);
  ops::cpu::force_float_products(ops::cpu::FloatProducts::Tiles);
  EXPECT_EQ(cpu_kernel_info().float_products, "tiles");
  EXPECT_NE(cpu_kernel_info().summary.find("attn's tiles"), std::string::npos) << cpu_kernel_info().summary;
  ops::cpu::force_float_products(ops::cpu::FloatProducts::Blas);
  EXPECT_EQ(cpu_kernel_info().float_products, "blas");
  EXPECT_NE(cpu_kernel_info().summary.find("on BLAS"), std::string::npos) << cpu_kernel_info().summary;
  ops::cpu::reset_float_products();
}

// A fused call's product route is chosen once, by the op, from the inputs' dtype, what the CPU runs and the
// settings: the rule of products/route.h, for every variant this CPU can force.
TEST(ProductRoute, ChosenFromTheDtypeTheCpuAndTheSettings) {
  using ops::cpu::ProductRoute;
  const bool avx512 = ops::cpu::hardware_capability_limit() >= Capability::Avx512;
  {
    CapabilityScope avx2(Capability::Avx2);
    EXPECT_EQ(ops::cpu::flash_product_route(at::kFloat, true), ProductRoute::Blas);
    EXPECT_EQ(ops::cpu::flash_product_route(at::kBFloat16, true), ProductRoute::Blas);  // widened, on BLAS
  }
  EXPECT_EQ(ops::cpu::flash_product_route(at::kDouble, true), ProductRoute::Blas);
  if (!avx512) {
    std::printf("[ NOTE     ] this CPU has no AVX-512: only the BLAS route can run here\n");
    EXPECT_EQ(ops::cpu::flash_product_route(at::kFloat, true), ProductRoute::Blas);
    return;
  }
  CapabilityScope scope(Capability::Avx512);
  EXPECT_EQ(ops::cpu::flash_product_route(at::kFloat, true), ProductRoute::FloatTiles);
  // bfloat16 widened to float takes the float route of the variant.
  EXPECT_EQ(ops::cpu::flash_product_route(at::kBFloat16, true), ProductRoute::FloatTiles);
  ops::cpu::force_float_products(ops::cpu::FloatProducts::Blas);
  EXPECT_EQ(ops::cpu::flash_product_route(at::kFloat, true), ProductRoute::Blas);
  ops::cpu::reset_float_products();
  if (!cpu_has_bf16_route()) {
    std::printf("[ NOTE     ] this CPU has no AVX512-BF16: the pairs route cannot run here\n");
    return;
  }
  Bf16RouteScope pairs(/*amx=*/false);
  EXPECT_EQ(ops::cpu::flash_product_route(at::kBFloat16, true), ProductRoute::BfloatPairs);
  // Odd pair dimensions widen instead; float never takes the pairs.
  EXPECT_EQ(ops::cpu::flash_product_route(at::kBFloat16, false), ProductRoute::FloatTiles);
  EXPECT_EQ(ops::cpu::flash_product_route(at::kFloat, true), ProductRoute::FloatTiles);
}

// AMX's tiles: taken for bfloat16 wherever the CPU has them and the AVX-512 variant with AVX512-BF16 runs,
// named in cpu_kernel_info(), and off when forced off (or on a lower variant); never on a CPU without them.
TEST(AmxRoute, ChosenWhereTheCpuHasTilesAndNamedInKernelInfo) {
  using ops::cpu::ProductRoute;
  if (!amx_runs_here("the route cannot run here")) {
    ops::cpu::force_amx_tiles(true);
    EXPECT_FALSE(ops::cpu::amx_route_chosen());
    EXPECT_FALSE(cpu_kernel_info().amx_tiles);
    EXPECT_NE(ops::cpu::flash_product_route(at::kBFloat16, true), ProductRoute::AmxTiles);
    EXPECT_FALSE(ops::cpu::decode_takes_amx(at::kBFloat16, at::kBFloat16, 64));
    EXPECT_EQ(cpu_kernel_info().bfloat16_decode, "widened");
    // The reason is the availability's, in the info; the summary repeats it only on a CPU that lists AMX (or in
    // a build that emulates the tiles).
    const std::string& reason = ops::cpu::amx_availability().reason;
    EXPECT_FALSE(reason.empty());
    EXPECT_EQ(cpu_kernel_info().amx_unused_reason, reason);
    EXPECT_EQ(cpu_kernel_info().summary.find("AMX tiles unused: " + reason) != std::string::npos,
              ops::cpu::amx_availability().cpu_lists || ops::cpu::amx_availability().emulated)
        << cpu_kernel_info().summary;
    ops::cpu::reset_amx_tiles();
    return;
  }
  // Nothing forced: the tiles, unless the environment turned them off.
  const char* env = std::getenv("ATTN_AMX");
  EXPECT_EQ(cpu_kernel_info().amx_tiles, !(env && std::string(env) == "off"));
  {
    Bf16RouteScope route(/*amx=*/true);
    EXPECT_EQ(ops::cpu::flash_product_route(at::kBFloat16, true), ProductRoute::AmxTiles);
    // Odd pair dimensions widen; float never takes the tiles.
    EXPECT_EQ(ops::cpu::flash_product_route(at::kBFloat16, false), ProductRoute::FloatTiles);
    EXPECT_EQ(ops::cpu::flash_product_route(at::kFloat, true), ProductRoute::FloatTiles);
    const CpuKernelInfo info = cpu_kernel_info();
    EXPECT_TRUE(info.amx_tiles);
    EXPECT_TRUE(info.bfloat16_route);
    EXPECT_EQ(info.variant, "avx512_bf16");
    EXPECT_NE(info.summary.find("AMX tiles"), std::string::npos) << info.summary;
    EXPECT_EQ(info.amx_unused_reason, "");
    EXPECT_EQ(info.summary.find("unused"), std::string::npos) << info.summary;
    // The decode kernel: a bfloat16 query over a bfloat16 cache, from kAmxDecodeMinRows rows per K/V head.
    EXPECT_EQ(info.bfloat16_decode, "amx");
    EXPECT_NE(info.summary.find("bfloat16 decode on AMX tiles from 16 query rows"), std::string::npos) << info.summary;
    EXPECT_TRUE(ops::cpu::decode_takes_amx(at::kBFloat16, at::kBFloat16, ops::cpu::kAmxDecodeMinRows));
    EXPECT_FALSE(ops::cpu::decode_takes_amx(at::kBFloat16, at::kBFloat16, ops::cpu::kAmxDecodeMinRows - 1));
    EXPECT_FALSE(ops::cpu::decode_takes_amx(at::kFloat, at::kBFloat16, 64));  // a float query keeps float scores
    EXPECT_FALSE(ops::cpu::decode_takes_amx(at::kBFloat16, at::kChar, 64));   // int8 has its dot products
  }
  {
    Bf16RouteScope route(/*amx=*/false);
    EXPECT_EQ(ops::cpu::flash_product_route(at::kBFloat16, true), ProductRoute::BfloatPairs);
    EXPECT_FALSE(cpu_kernel_info().amx_tiles);
    EXPECT_EQ(cpu_kernel_info().bfloat16_decode, "widened");
    EXPECT_EQ(cpu_kernel_info().amx_unused_reason, "forced off (force_amx_tiles)");
    EXPECT_NE(cpu_kernel_info().summary.find("AMX tiles unused: forced off"), std::string::npos)
        << cpu_kernel_info().summary;
  }
  // The AVX-512 variant without AVX512-BF16 widens, tiles or not.
  CapabilityScope widened(Capability::Avx512);
  ops::cpu::force_amx_tiles(true);
  EXPECT_EQ(ops::cpu::flash_product_route(at::kBFloat16, true), ProductRoute::FloatTiles);
  ops::cpu::reset_amx_tiles();
}

#ifdef ATTN_HAVE_BF16_DOT

// The probe that chooses the route: a FLOP-rate ratio that can only lie between 0 and 4 (a pair product is two
// FMAs' work, issued at most twice as often), and stable from call to call, so that the route does not flip
// from one process to the next (the tile timing it replaced read 1.1x to 3.1x on one CPU).
TEST(Bf16Route, PairProductProbeIsStable) {
  if (!cpu_has_bf16_route()) {
    EXPECT_EQ(cpu_kernel_info().bfloat16_pair_speed, 0.0);
    return;
  }
  std::vector<double> speeds;
  for (int i = 0; i < 5; ++i) speeds.push_back(ops::cpu::pair_product_speed());
  const auto [low, high] = std::minmax_element(speeds.begin(), speeds.end());
  EXPECT_GT(*low, 0.1);
  EXPECT_LT(*high, 4.5);
  EXPECT_LT(*high / *low, 1.3) << "probes from " << *low << " to " << *high;
  const bool chosen = *low >= ops::cpu::kBf16RouteMargin, also_chosen = *high >= ops::cpu::kBf16RouteMargin;
  EXPECT_EQ(chosen, also_chosen) << "the route's choice flipped between probes: " << *low << ", " << *high;
}

/// A [rows, cols] bfloat16 matrix of N(0, 1) values, and its float64 copy (the values exactly).
struct Matrix {
  std::vector<c10::BFloat16> data;
  torch::Tensor exact;
  int64_t ld;
};

Matrix random_matrix(int64_t rows, int64_t cols, int64_t ld, uint64_t seed) {
  torch::manual_seed(seed);
  const torch::Tensor values = torch::randn({rows, cols}).to(torch::kBFloat16);
  Matrix m{std::vector<c10::BFloat16>(std::max<int64_t>(rows * ld + 2, 2), c10::BFloat16(0.0f)),
           values.to(torch::kFloat64), ld};
  const auto* src = values.data_ptr<c10::BFloat16>();
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) m.data[r * ld + c] = src[r * cols + c];
  }
  return m;
}

torch::Tensor as_tensor(const std::vector<float>& c, int64_t m, int64_t n, int64_t ldc) {
  return torch::from_blob(const_cast<float*>(c.data()), {m, n}, {ldc, 1}, torch::kFloat32).to(torch::kFloat64);
}

/// |C - reference| within float32 accumulation of k products of magnitude ~1.
void expect_product(const torch::Tensor& actual, const torch::Tensor& expected, int64_t k) {
  const double tol = 1e-6 * (k + 1) + 1e-6 * expected.abs().max().item<double>();
  EXPECT_TRUE(torch::isfinite(actual).all().item<bool>());
  EXPECT_LE((actual - expected).abs().max().item<double>(), tol);
}

TEST(Bf16Gemm, MatchesFloat64ProductOfTheRoundedInputs) {
  if (skip_without_bf16_route()) return;
  uint64_t seed = 1;
  // Sizes either side of the register tiles (6 rows, 16-column vectors).
  for (int64_t m : {1, 5, 6, 7, 13, 16, 17, 33, 40}) {
    for (int64_t n : {1, 15, 16, 17, 40, 64, 65, 130}) {
      for (int64_t k : {1, 2, 3, 33, 64, 129}) {
        SCOPED_TRACE(::testing::Message() << "m=" << m << " n=" << n << " k=" << k);
        // A row-major with an even leading dimension and a zero pad column past an odd k.
        const int64_t lda = k + 3 + (k + 3) % 2;
        const Matrix a = random_matrix(m, k, lda, ++seed), b = random_matrix(k, n, n + 1, ++seed);
        const torch::Tensor expected = 0.5 * a.exact.matmul(b.exact);

        const int64_t ld = ops::cpu::pairs_row_length(n), pairs = (k + 1) / 2;
        std::vector<uint32_t> rows_packed(pairs * ld + ops::cpu::kPairLanes, 7u);
        ops::cpu::pack_rows_in_pairs(b.data.data(), b.ld, k, n, rows_packed.data(), ld);
        // The same B from its transpose (as keys are stored) must give the same layout.
        const int64_t ldt = k + 1;
        std::vector<c10::BFloat16> bt(n * ldt + 2, c10::BFloat16(0.0f));
        for (int64_t r = 0; r < k; ++r) {
          for (int64_t c = 0; c < n; ++c) bt[c * ldt + r] = b.data[r * b.ld + c];
        }
        std::vector<uint32_t> transposed_packed(pairs * ld + ops::cpu::kPairLanes, 9u);
        ops::cpu::pack_transposed_in_pairs(bt.data(), ldt, n, k, transposed_packed.data(), ld);
        EXPECT_TRUE(std::equal(rows_packed.begin(), rows_packed.begin() + pairs * ld, transposed_packed.begin()));

        // Past the pack, NaN: the products read only their `pairs` pairs.
        std::fill(rows_packed.begin() + pairs * ld, rows_packed.end(), 0x7FC07FC0u);

        // beta = 0 writes C without reading it: NaN there must not leak in.
        const int64_t ldc = n + 5;
        std::vector<float> c(m * ldc, std::numeric_limits<float>::quiet_NaN());
        ops::cpu::bf16_gemm(m, n, pairs, 0.5f, {a.data.data(), a.ld, 2}, {rows_packed.data(), ld}, 0.0f, c.data(),
                            ldc, nullptr);
        expect_product(as_tensor(c, m, n, ldc), expected, k);
        // The columns between n and ldc are not C's: untouched.
        for (int64_t i = 0; i < m; ++i) EXPECT_TRUE(std::isnan(c[i * ldc + n])) << "row " << i;

        // beta = 1 accumulates.
        std::vector<float> acc(m * ldc, 1.0f);
        for (int64_t i = 0; i < m; ++i) acc[i * ldc + n] = -7.0f;
        ops::cpu::bf16_gemm(m, n, pairs, 0.5f, {a.data.data(), a.ld, 2}, {rows_packed.data(), ld}, 1.0f, acc.data(),
                            ldc, nullptr);
        expect_product(as_tensor(acc, m, n, ldc), expected + 1.0, k);
        for (int64_t i = 0; i < m; ++i) EXPECT_EQ(acc[i * ldc + n], -7.0f) << "row " << i;
      }
    }
  }
}

// The row maxima the product gives on the side (lane_max): lane l of a row is the maximum of its columns l,
// l + 16, ... (whatever lane_max held before), and a beta = 1 call takes the sums it writes.
TEST(Bf16Gemm, LaneMaximaAreTheRowMaximaOfTheWrittenResults) {
  if (skip_without_bf16_route()) return;
  constexpr int64_t kLanes = ops::cpu::kPairLanes;
  uint64_t seed = 70;
  {
    for (int64_t m : {1, 6, 7, 13, 17, 40}) {
      for (int64_t n : {1, 17, 33, 64, 130}) {
        SCOPED_TRACE(::testing::Message() << "m=" << m << " n=" << n);
        const int64_t k = 64, ld = ops::cpu::pairs_row_length(n);
        const Matrix a = random_matrix(m, k, k, ++seed), b = random_matrix(k, n, n, ++seed);
        std::vector<uint32_t> packed(k / 2 * ld + kLanes);
        ops::cpu::pack_rows_in_pairs(b.data.data(), b.ld, k, n, packed.data(), ld);
        // Garbage in lane_max beforehand: the call replaces it.
        std::vector<float> c(m * n), lanes(m * kLanes, 1e30f);
        lanes[1] = std::numeric_limits<float>::quiet_NaN();
        ops::cpu::bf16_gemm(m, n, k / 2, 0.25f, {a.data.data(), a.ld, 2}, {packed.data(), ld}, 0.0f, c.data(), n,
                            lanes.data());
        const torch::Tensor expected = 0.25 * a.exact.matmul(b.exact);
        expect_product(as_tensor(c, m, n, n), expected, k);
        const torch::Tensor lane_rows = torch::from_blob(lanes.data(), {m, kLanes}).to(torch::kFloat64);
        for (int64_t i = 0; i < m; ++i) {
          // Lane l holds the maximum of the columns l, l + 16, ...: -inf where the row has no such column.
          for (int64_t l = 0; l < kLanes; ++l) {
            if (l >= n) {
              EXPECT_EQ(lane_rows[i][l].item<double>(), -std::numeric_limits<double>::infinity());
              continue;
            }
            const double want = expected[i].slice(0, l, n, kLanes).max().item<double>();
            EXPECT_NEAR(lane_rows[i][l].item<double>(), want, 1e-6 * (k + 1) + 1e-6 * std::abs(want));
          }
        }
        // beta = 1: the maxima of C + A·B as written.
        std::vector<float> shifted(m * n, 100.0f), lanes1(m * kLanes, 1e30f);
        ops::cpu::bf16_gemm(m, n, k / 2, 0.25f, {a.data.data(), a.ld, 2}, {packed.data(), ld}, 1.0f, shifted.data(),
                            n, lanes1.data());
        for (int64_t i = 0; i < m; ++i) {
          const double want = 100.0 + expected[i].max().item<double>();
          const double got = *std::max_element(lanes1.begin() + i * kLanes, lanes1.begin() + (i + 1) * kLanes);
          EXPECT_NEAR(got, want, 1e-4);
        }
      }
    }
  }
}

// The routes' softmax step against exp in float64: P within bfloat16's rounding of the exact value and the
// exp's own 1.03e-4 (math/exp_polynomial.h's cubic), the sum within 1.2e-4, P exactly 1 at the row's maximum,
// the flush limit and the edge values as the float route's exp gives them;
// with the softmax scale folded in (the AMX route's unscaled scores) or not, and the pad after the row zeroed
// up to where it is asked to be, for pair reads (the pairs) or whole tiles (AMX).
TEST(Bf16Softmax, ExpRoundSumMatchesFloat64) {
  if (skip_without_bf16_route()) return;
  for (const float scale : {1.0f, 0.125f}) {
    for (int64_t n : {1, 2, 15, 16, 17, 31, 32, 33, 64, 100, 513}) {
      for (const int64_t padded : {n + n % 2, (n + 31) / 32 * 32}) {
        SCOPED_TRACE(::testing::Message() << "n=" << n << " scale=" << scale << " padded=" << padded);
        torch::manual_seed(n);
        // Scaled scores from 70 below the shift up to it, the row's maximum (of the keys not blocked) among them.
        torch::Tensor scores = (torch::rand({n}) * -70.0f + 3.0f) / scale;
        if (n > 3) scores[1] = -std::numeric_limits<float>::infinity();  // a blocked key
        const float shift = scale * scores.max().item<float>();
        std::vector<float> s(scores.data_ptr<float>(), scores.data_ptr<float>() + n);
        std::vector<c10::BFloat16> p(padded + 2, c10::BFloat16(7.0f));
        // The second padding asks for the row's peak as well: the same pass with one more reduction.
        const bool with_peak = padded != n + n % 2;
        float peak = 0.0f;
        const float sum =
            ops::cpu::exp_round_sum(s.data(), n, scale, shift, p.data(), padded, with_peak ? &peak : nullptr);
        if (with_peak) EXPECT_EQ(peak, scores.max().item<float>());

        const torch::Tensor d =
            torch::from_blob(s.data(), {n}).to(torch::kFloat64) * static_cast<double>(scale) - static_cast<double>(shift);
        const torch::Tensor exact =
            torch::where(d < ops::cpu::exp_polynomial::kFlushBelow, torch::zeros_like(d), d.exp());
        const torch::Tensor got = torch::from_blob(p.data(), {n}, torch::kBFloat16).to(torch::kFloat64);
        // One bfloat16 rounding of the exact value: half an ulp (up to 2^-8 relative, 7 fraction bits), and the
        // exp's own error at bfloat16's precision (1.03e-4 relative, math/exp_polynomial.h).
        EXPECT_TRUE(((got - exact).abs() <= exact * (std::ldexp(1.0, -8) + 1.1e-4)).all().item<bool>())
            << "max relative error " << ((got - exact).abs() / exact.clamp_min(1e-300)).max().item<double>();
        EXPECT_TRUE((got.masked_select(exact == 0) == 0).all().item<bool>()) << "flushed or blocked keys must be 0";
        EXPECT_NEAR(sum, exact.sum().item<double>(), 1.2e-4 * exact.sum().item<double>());
        // The row's maximum weighs exactly 1 in bfloat16, and 1 in the float sum up to its t's rounding: t = 0
        // but for the rounding of shift · log2 e (|shift| · 2^-24 relative), the cubic exact at 0 and continuous
        // at 1.
        EXPECT_EQ(static_cast<float>(p[scores.argmax().item<int64_t>()]), 1.0f);
        if (n == 1) EXPECT_NEAR(sum, 1.0f, (std::abs(shift) + 2.0f) * std::ldexp(1.0f, -24));
        // The pad up to `padded` is 0; past it nothing is written.
        for (int64_t j = n; j < padded; ++j) EXPECT_EQ(static_cast<float>(p[j]), 0.0f) << "pad element " << j;
        EXPECT_EQ(static_cast<float>(p[padded]), 7.0f);
        EXPECT_EQ(static_cast<float>(p[padded + 1]), 7.0f);
      }
    }
  }
  // NaN stays in its element and the sum.
  std::vector<float> s(40, -1.0f);
  s[21] = std::numeric_limits<float>::quiet_NaN();
  std::vector<c10::BFloat16> p(40);
  EXPECT_TRUE(std::isnan(ops::cpu::exp_round_sum(s.data(), 40, 1.0f, 0.0f, p.data(), 40)));
  EXPECT_TRUE(std::isnan(static_cast<float>(p[21])));
  EXPECT_FLOAT_EQ(static_cast<float>(p[20]), static_cast<float>(c10::BFloat16(std::exp(-1.0f))));
  // A shift near float's largest, whose t = shift · log2 e would overflow: the maximum still weighs 1, and the keys
  // below it (one ulp is 2^104 there) 0.
  const float top = 3.0e38f, below = std::nextafter(top, 0.0f);
  std::vector<float> huge = {below, top, 1.0f};
  std::vector<c10::BFloat16> ph(4);
  const float huge_sum = ops::cpu::exp_round_sum(huge.data(), 3, 1.0f, top, ph.data(), 4);
  EXPECT_EQ(static_cast<float>(ph[1]), 1.0f);
  EXPECT_EQ(static_cast<float>(ph[2]), 0.0f);
  EXPECT_EQ(static_cast<float>(ph[0]), 0.0f);
  EXPECT_FLOAT_EQ(huge_sum, 1.0f);
}

TEST(Bf16Softmax, ExpToBfloat16PrecisionMatchesFloat64) {
  if (skip_without_bf16_route()) return;
  for (const float scale : {1.0f, 0.125f}) {
    for (const int64_t n : {1, 15, 16, 17, 32, 33, 100, 128}) {
      SCOPED_TRACE(::testing::Message() << "n=" << n << " scale=" << scale);
      torch::manual_seed(n);
      // Scaled scores from 70 below the shift to 2 above it (the backward's lse is at least the row's maximum;
      // above it is the stale-shift case), a blocked key and a NaN among them.
      torch::Tensor scores = (torch::rand({n}) * -72.0f + 2.0f) / scale;
      if (n > 3) scores[1] = -std::numeric_limits<float>::infinity();
      if (n > 5) scores[4] = std::numeric_limits<float>::quiet_NaN();
      const float shift = 0.5f;
      std::vector<float> x(scores.data_ptr<float>(), scores.data_ptr<float>() + n);
      x.push_back(7.0f);  // past n: untouched
      ops::cpu::exp_to_bfloat16_precision(x.data(), n, scale, shift);
      const torch::Tensor d = scores.to(torch::kFloat64) * static_cast<double>(scale) - static_cast<double>(shift);
      const torch::Tensor exact =
          torch::where(d < ops::cpu::exp_polynomial::kFlushBelow, torch::zeros_like(d), d.exp());
      const torch::Tensor got = torch::tensor(std::vector<double>(x.begin(), x.begin() + n), torch::kFloat64);
      const torch::Tensor numbers = ~d.isnan();
      EXPECT_TRUE(((got - exact).abs() <= exact * 1.1e-4).masked_select(numbers).all().item<bool>())
          << "max relative error "
          << ((got - exact).abs() / exact.clamp_min(1e-300)).masked_select(numbers).max().item<double>();
      EXPECT_TRUE(got.isnan().equal(d.isnan()));
      EXPECT_EQ(x[n], 7.0f);
    }
  }
  // A shift whose t would overflow: the full-precision exp of d.
  std::vector<float> huge = {3.0e38f, 1.0f};
  ops::cpu::exp_to_bfloat16_precision(huge.data(), 2, 1.0f, 3.0e38f);
  EXPECT_NEAR(huge[0], 1.0f, 1e-6f);
  EXPECT_EQ(huge[1], 0.0f);
}

TEST(Bf16Gemm, LeftOperandInPairsLayout) {
  if (skip_without_bf16_route()) return;
  // C = Aᵀ·B with A [k, m] packed in pairs of its rows: the pairs layout of the left operand Aᵀ (si = 2,
  // sp = 2·ld), whose pairs are not adjacent.
  {
    for (int64_t k : {1, 8, 33, 64}) {
      for (int64_t m : {3, 17, 40}) {
        const int64_t n = 20;
        SCOPED_TRACE(::testing::Message() << "k=" << k << " m=" << m);
        const Matrix a = random_matrix(k, m, m, 40 + k + m), b = random_matrix(k, n, n, 90 + k + m);
        const torch::Tensor expected = a.exact.t().matmul(b.exact);

        const int64_t lda = ops::cpu::pairs_row_length(m), ldb = ops::cpu::pairs_row_length(n), pairs = (k + 1) / 2;
        std::vector<uint32_t> a_pairs(pairs * lda), b_pairs(pairs * ldb + ops::cpu::kPairLanes);
        ops::cpu::pack_rows_in_pairs(a.data.data(), a.ld, k, m, a_pairs.data(), lda);
        ops::cpu::pack_rows_in_pairs(b.data.data(), b.ld, k, n, b_pairs.data(), ldb);
        std::vector<float> c(m * n);
        const auto* left = reinterpret_cast<const c10::BFloat16*>(a_pairs.data());
        ops::cpu::bf16_gemm(m, n, pairs, 1.0f, {left, 2, 2 * lda}, {b_pairs.data(), ldb}, 0.0f, c.data(), n, nullptr);
        expect_product(as_tensor(c, m, n, n), expected, k);
      }
    }
  }
}

// The backward pass's Pᵀ and dSᵀ: a float [k, m] block (times a scale: the AMX route folds the softmax scale in
// here) transposed and rounded into a row-major bfloat16 left operand. Each element is LibTorch's rounding of the
// scaled float (to nearest even), the pad element past an odd k is 0, nothing past it is written, and the products
// of that operand match float64.
TEST(Bf16Gemm, TransposedRoundingGivesTheRowMajorLeftOperand) {
  if (skip_without_bf16_route()) return;
  for (const float scale : {1.0f, 0.3f}) {
    // k from under one 16-row block to 32-row blocks with 16-row and partial blocks after them.
    for (int64_t k : {1, 8, 16, 33, 64, 86}) {
      for (int64_t m : {3, 16, 17, 40, 128}) {
        SCOPED_TRACE(::testing::Message() << "k=" << k << " m=" << m << " scale=" << scale);
        torch::manual_seed(k * 131 + m);
        const int64_t ldx = m + 3;
        const torch::Tensor x = torch::randn({k, ldx});
        const torch::Tensor rounded_t = (x.narrow(1, 0, m) * scale).t().to(torch::kBFloat16);  // [m, k]
        const int64_t ldt = (k + 1) / 2 * 2 + 2;  // two more than needed: must stay untouched
        const c10::BFloat16 sentinel(-3.0f);
        std::vector<c10::BFloat16> t(m * ldt, sentinel);
        ops::cpu::transpose_round_to_bfloat16(x.data_ptr<float>(), ldx, k, m, t.data(), ldt, scale);
        const torch::Tensor got = torch::from_blob(t.data(), {m, ldt}, torch::kBFloat16).clone();
        EXPECT_TRUE(torch::equal(got.narrow(1, 0, k), rounded_t)) << "not the nearest-even rounding of the transpose";
        for (int64_t j = 0; j < m; ++j) {
          if (k % 2) EXPECT_EQ(static_cast<float>(t[j * ldt + k]), 0.0f) << "pad of row " << j;
          for (int64_t i = (k + 1) / 2 * 2; i < ldt; ++i) {
            EXPECT_EQ(static_cast<float>(t[j * ldt + i]), -3.0f) << "row " << j << " element " << i;
          }
        }

        const int64_t n = 20, ldb = ops::cpu::pairs_row_length(n), pairs = (k + 1) / 2;
        const Matrix b = random_matrix(k, n, n, 7 + k + m);
        std::vector<uint32_t> b_pairs(pairs * ldb + ops::cpu::kPairLanes);
        ops::cpu::pack_rows_in_pairs(b.data.data(), b.ld, k, n, b_pairs.data(), ldb);
        const torch::Tensor expected = rounded_t.to(torch::kFloat64).matmul(b.exact);
        std::vector<float> c(m * n, 1.0f);
        ops::cpu::bf16_gemm(m, n, pairs, 1.0f, {t.data(), ldt, 2}, {b_pairs.data(), ldb}, 1.0f, c.data(), n, nullptr);
        expect_product(as_tensor(c, m, n, n), expected + 1.0, k);
      }
    }
  }
}

// dS rounded for dS·K, times a scale (the AMX route's dK and dQ): LibTorch's nearest-even rounding of the scaled
// float, the pad element past an odd row 0.
TEST(Bf16Softmax, RoundingTakesTheScale) {
  if (skip_without_bf16_route()) return;
  for (const float scale : {1.0f, 0.3f}) {
    for (int64_t n : {1, 16, 33}) {
      SCOPED_TRACE(::testing::Message() << "n=" << n << " scale=" << scale);
      torch::manual_seed(n);
      const torch::Tensor x = torch::randn({n});
      std::vector<c10::BFloat16> p(n + 2, c10::BFloat16(-3.0f));
      ops::cpu::round_to_bfloat16(x.data_ptr<float>(), n, p.data(), scale);
      EXPECT_TRUE(torch::equal(torch::from_blob(p.data(), {n}, torch::kBFloat16).clone(), (x * scale).to(torch::kBFloat16)));
      EXPECT_EQ(static_cast<float>(p[n]), n % 2 ? 0.0f : -3.0f);
      EXPECT_EQ(static_cast<float>(p[n + 1]), -3.0f);
    }
  }
}

// The backward's dS straight from P and dP, rounded twice (the AMX route's dS·K and dSᵀ·Q operands), and Pᵀ
// rounded in the same pass (for Pᵀ·dO): LibTorch's float32 p · (dp - delta) · scale and p, rounded to nearest
// even, dS zero where p is 0 even against an Inf or NaN dp, and a NaN p's NaN kept; nothing written past the tile.
TEST(Bf16Softmax, BackwardRoundingMatchesLibTorchBothWays) {
  if (skip_without_bf16_route()) return;
  for (const float scale : {1.0f, 0.125f}) {
    for (const auto& [rows, cols] : {std::pair<int64_t, int64_t>{32, 16}, {64, 48}, {256, 128}}) {
      SCOPED_TRACE(::testing::Message() << rows << " x " << cols << ", scale " << scale);
      torch::manual_seed(rows + cols);
      const int64_t ld = cols + 5;
      torch::Tensor p = torch::rand({rows, ld}), dp = torch::randn({rows, ld});
      const torch::Tensor delta = torch::randn({rows});
      // Blocked pairs: p = 0, their dP anything; and one NaN p.
      for (int64_t i = 0; i < rows; i += 7) {
        p.index_put_({i, (i * 5) % cols}, 0.0f);
        dp.index_put_({i, (i * 5) % cols}, i % 2 ? INFINITY : NAN);
        p.index_put_({i, (i * 3 + 1) % cols}, 0.0f);
      }
      p.index_put_({rows - 1, cols - 1}, NAN);
      const torch::Tensor tile_p = p.narrow(1, 0, cols), tile_dp = dp.narrow(1, 0, cols);
      const torch::Tensor expected =
          torch::where(tile_p == 0, torch::zeros_like(tile_p), tile_p * (tile_dp - delta.unsqueeze(1)))
              .mul(scale)
              .to(torch::kBFloat16);
      const int64_t ld_rows = cols + 32, ld_cols = rows + 16;  // past the tile: must stay untouched
      const c10::BFloat16 sentinel(-3.0f);
      std::vector<c10::BFloat16> by_rows(rows * ld_rows, sentinel), by_cols(cols * ld_cols, sentinel);
      std::vector<c10::BFloat16> probs_by_cols(cols * ld_cols, sentinel);
      ops::cpu::softmax_backward_round(p.data_ptr<float>(), dp.data_ptr<float>(), ld, rows, cols,
                                       delta.data_ptr<float>(), scale, by_rows.data(), ld_rows, by_cols.data(),
                                       ld_cols, probs_by_cols.data());
      const torch::Tensor got_probs =
          torch::from_blob(probs_by_cols.data(), {cols, ld_cols}, torch::kBFloat16).clone();
      EXPECT_TRUE(torch::allclose(got_probs.narrow(1, 0, rows).to(torch::kFloat32),
                                  tile_p.t().to(torch::kBFloat16).to(torch::kFloat32), 0.0, 0.0, /*equal_nan=*/true));
      EXPECT_TRUE((got_probs.narrow(1, rows, ld_cols - rows).to(torch::kFloat32) == -3.0f).all().item<bool>());
      const torch::Tensor got_rows = torch::from_blob(by_rows.data(), {rows, ld_rows}, torch::kBFloat16).clone();
      const torch::Tensor got_cols = torch::from_blob(by_cols.data(), {cols, ld_cols}, torch::kBFloat16).clone();
      // equal_nan: the one NaN p gives NaN in both.
      EXPECT_TRUE(torch::allclose(got_rows.narrow(1, 0, cols).to(torch::kFloat32), expected.to(torch::kFloat32), 0.0,
                                  0.0, /*equal_nan=*/true));
      EXPECT_TRUE(torch::allclose(got_cols.narrow(1, 0, rows).to(torch::kFloat32), expected.t().to(torch::kFloat32),
                                  0.0, 0.0, /*equal_nan=*/true));
      EXPECT_TRUE(torch::isnan(got_rows.index({rows - 1, cols - 1})).item<bool>());
      EXPECT_TRUE((got_rows.narrow(1, cols, ld_rows - cols).to(torch::kFloat32) == -3.0f).all().item<bool>());
      EXPECT_TRUE((got_cols.narrow(1, rows, ld_cols - rows).to(torch::kFloat32) == -3.0f).all().item<bool>());
    }
  }
}

#ifdef ATTN_HAVE_AMX

// AMX's two products (products/amx_panels.h) against float64 products of the same bfloat16 values: every edge of
// their tiles (rows short of 16 and 32, k short of a pair block or a chunk, columns short of a panel or a column
// group), operands that start inside a pack, and nothing written where the contract says nothing is.

/// A [rows, cols] bfloat16 left operand as the products read it: row stride ld, zero past cols and in the rows
/// up to the next multiple of 16.
Matrix amx_left_operand(int64_t rows, int64_t cols, int64_t ld, uint64_t seed) {
  Matrix a = random_matrix(rows, cols, ld, seed);
  a.data.resize(std::max<size_t>(a.data.size(), (rows + 15) / 16 * 16 * ld), c10::BFloat16(0.0f));
  return a;
}

TEST(Amx, PanelsProductMatchesFloat64) {
  if (!ops::cpu::hardware_has_amx()) GTEST_SKIP() << amx_absence();
  uint64_t seed = 300;
  for (int64_t m : {1, 5, 16, 17, 32, 33, 70}) {
    for (int64_t width : {8, 24, 64, 66, 130}) {
      for (int64_t n : {1, 15, 16, 33, 100}) {
        for (int64_t row0 : {0, 16, 48}) {
          SCOPED_TRACE(::testing::Message() << "m=" << m << " k=" << width << " n=" << n << " from row " << row0);
          const int64_t all_rows = row0 + n + 5;
          const Matrix x = random_matrix(all_rows, width, width + 2, ++seed);
          std::vector<uint32_t> packed(ops::cpu::amx_panel_words(all_rows, width), 7u);
          ops::cpu::amx_pack_column_panels(x.data.data(), x.ld, all_rows, width, packed.data());
          const int64_t blocks = ops::cpu::amx_pair_blocks(width), lda = blocks * 32;
          const Matrix a = amx_left_operand(m, width, lda, ++seed);
          const int64_t panels = (n + 15) / 16, ldc = panels * 16 + 3;
          const int64_t tile_rows = (m + 15) / 16 * 16;  // C's tiles are stored whole
          std::vector<float> c((tile_rows + 2) * ldc, std::numeric_limits<float>::quiet_NaN());
          ops::cpu::amx_multiply_panels(a.data.data(), lda, m, blocks,
                                        packed.data() + ops::cpu::amx_panel_offset(row0, width), panels, c.data(), ldc);
          const torch::Tensor expected = a.exact.matmul(x.exact.narrow(0, row0, n).t());
          expect_product(as_tensor(c, m, n, ldc), expected, width);
          for (int64_t i = 0; i < m; ++i) {
            for (int64_t j = panels * 16; j < ldc; ++j) EXPECT_TRUE(std::isnan(c[i * ldc + j])) << i << ", " << j;
          }
          for (int64_t i = tile_rows; i < tile_rows + 2; ++i) {
            EXPECT_TRUE(std::isnan(c[i * ldc])) << "row " << i << " is past C's tiles";
          }
        }
      }
    }
  }
}

TEST(Amx, RowPairsProductMatchesFloat64) {
  if (!ops::cpu::hardware_has_amx()) GTEST_SKIP() << amx_absence();
  uint64_t seed = 600;
  for (int64_t m : {1, 15, 16, 17, 32, 40, 130}) {
    for (int64_t k : {1, 31, 32, 33, 64, 100}) {
      for (int64_t n : {1, 16, 17, 64, 80}) {
        for (int64_t row0 : {0, 32}) {
          SCOPED_TRACE(::testing::Message() << "m=" << m << " k=" << k << " n=" << n << " from row " << row0);
          const int64_t all_rows = row0 + k + 7;
          const Matrix b = random_matrix(all_rows, n, n + 1, ++seed);
          std::vector<uint32_t> packed(ops::cpu::amx_row_pair_words(all_rows, n), 9u);
          ops::cpu::amx_pack_row_pairs(b.data.data(), b.ld, all_rows, n, packed.data());
          const int64_t chunks = (k + 31) / 32, lda = chunks * 32 + 8;
          const Matrix a = amx_left_operand(m, k, lda, ++seed);
          const int64_t ldc = n + 3;
          std::vector<float> c(m * ldc, 1.0f);
          for (int64_t i = 0; i < m; ++i) std::fill(c.begin() + i * ldc + n, c.begin() + (i + 1) * ldc, -7.0f);
          ops::cpu::amx_multiply_add_row_pairs(a.data.data(), lda, m, chunks,
                                               packed.data() + ops::cpu::amx_row_pair_offset(row0),
                                               ops::cpu::amx_row_pair_group_stride(all_rows), n, c.data(), ldc);
          const torch::Tensor expected = 1.0 + a.exact.matmul(b.exact.narrow(0, row0, k));
          expect_product(as_tensor(c, m, n, ldc), expected, k);
          for (int64_t i = 0; i < m; ++i) {
            for (int64_t j = n; j < ldc; ++j) EXPECT_EQ(c[i * ldc + j], -7.0f) << i << ", " << j;
          }
        }
      }
    }
  }
}

#endif  // ATTN_HAVE_AMX

#endif  // ATTN_HAVE_BF16_DOT

// The route's forward through the public API, forced on: against the float64 math path and against the
// widened route, which rounds nothing but the inputs.
TEST(Bf16Route, ForwardAgreesWithFloat64AndWithTheWidenedRoute) {
  torch::manual_seed(3);
  const torch::Tensor q = torch::randn({2, 4, 300, 64}), k = torch::randn({2, 2, 700, 64}),
                      v = torch::randn({2, 2, 700, 64});
  const auto opts = SdpaOptions().causal(true).backend(Backend::Fused);
  const auto bf = [](const torch::Tensor& t) { return t.to(torch::kBFloat16); };
  const torch::Tensor expected =
      scaled_dot_product_attention(bf(q).to(torch::kFloat64), bf(k).to(torch::kFloat64), bf(v).to(torch::kFloat64),
                                   SdpaOptions().causal(true).backend(Backend::Math));
  torch::Tensor widened, paired;
  {
    CapabilityScope scope(Capability::Avx512);
    ASSERT_FALSE(ops::cpu::bf16_route_chosen());
    widened = scaled_dot_product_attention(bf(q), bf(k), bf(v), opts).to(torch::kFloat64);
  }
  const double size = expected.abs().mean().item<double>();
  EXPECT_LE((widened - expected).abs().max().item<double>(), 0.1 * size);
  EXPECT_LE((widened - expected).abs().mean().item<double>(), 3e-3 * size);
  if (!cpu_has_bf16_route()) {
    std::printf("[ NOTE     ] this CPU has no AVX512-BF16: only the widened route was checked\n");
    CapabilityScope scope(Capability::Avx512Bf16);
    EXPECT_FALSE(ops::cpu::bf16_route_chosen());
    return;
  }
  for (const bool amx : own_routes()) {
    SCOPED_TRACE(amx ? "AMX tiles" : "pairs");
    Bf16RouteScope route(amx);
    ASSERT_TRUE(ops::cpu::bf16_route_chosen() || amx);
    ASSERT_EQ(ops::cpu::flash_product_route(at::kBFloat16, true),
              amx ? ops::cpu::ProductRoute::AmxTiles : ops::cpu::ProductRoute::BfloatPairs);
    paired = scaled_dot_product_attention(bf(q), bf(k), bf(v), opts).to(torch::kFloat64);
    // The route rounds P, so it cannot agree with the widened route bit for bit: that it differs shows it ran.
    EXPECT_GT((paired - widened).abs().max().item<double>(), 0.0);
    // Relative to the outputs' mean size: bfloat16 output rounding alone is 2^-9 (0.2 %) of each value, rounding
    // P adds about as much again; a 1 % error anywhere in the route's products fails the mean bound.
    EXPECT_LE((paired - expected).abs().max().item<double>(), 0.1 * size);
    EXPECT_LE((paired - expected).abs().mean().item<double>(), 4e-3 * size);

    // Without a mask, the tiles keep the row maxima of their product and round P in the softmax's one pass.
    const auto f64 = [&](const torch::Tensor& t) { return bf(t).to(torch::kFloat64); };
    const torch::Tensor plain_expected =
        scaled_dot_product_attention(f64(q), f64(k), f64(v), SdpaOptions().backend(Backend::Math));
    const torch::Tensor plain =
        scaled_dot_product_attention(bf(q), bf(k), bf(v), SdpaOptions().backend(Backend::Fused)).to(torch::kFloat64);
    const double plain_size = plain_expected.abs().mean().item<double>();
    EXPECT_LE((plain - plain_expected).abs().max().item<double>(), 0.1 * plain_size);
    EXPECT_LE((plain - plain_expected).abs().mean().item<double>(), 4e-3 * plain_size);
  }
}

// Scores that rise from one key block (512 keys) to the next: by less than the AMX route's stale-shift slack (the
// later tiles weigh more than 1 against the earlier maxima) and by more (their rows are shifted again), the output
// and the log-sum-exp against float64 on the same rounded inputs.
TEST(Bf16Route, ScoresRisingAcrossKeyBlocksOnEachRoute) {
  if (skip_without_bf16_route()) return;
  torch::manual_seed(12);
  const auto bf = [](const torch::Tensor& t) { return t.to(torch::kBFloat16); };
  const auto f64 = [&](const torch::Tensor& t) { return bf(t).to(torch::kFloat64); };
  const torch::Tensor q = torch::randn({1, 2, 40, 64}), v = torch::randn({1, 2, 1300, 64});
  for (const double rise : {2.0, 6.0}) {
    SCOPED_TRACE(::testing::Message() << "rise " << rise);
    torch::Tensor k = torch::randn({1, 2, 1300, 64});
    k.narrow(2, 512, 512).mul_(rise);
    k.narrow(2, 1024, 276).mul_(rise * rise);
    const torch::Tensor scores = torch::matmul(f64(q), f64(k).transpose(-2, -1)) / 8.0;
    const torch::Tensor expected = torch::matmul(torch::softmax(scores, -1), f64(v));
    const torch::Tensor expected_lse = torch::logsumexp(scores, -1);
    const double size = expected.abs().mean().item<double>();
    for (const bool amx : own_routes()) {
      SCOPED_TRACE(amx ? "AMX tiles" : "pairs");
      Bf16RouteScope route(amx);
      const auto [out, lse] = ops::flash_attention(bf(q), bf(k), bf(v));
      const torch::Tensor got = out.to(torch::kFloat64);
      EXPECT_LE((got - expected).abs().max().item<double>(), 0.1 * size);
      EXPECT_LE((got - expected).abs().mean().item<double>(), 4e-3 * size);
      // The sum carries the exp's 1.03e-4 relative; the scores float's rounding of products up to ~|lse|.
      const torch::Tensor lse_error = (lse.to(torch::kFloat64) - expected_lse).abs();
      EXPECT_TRUE((lse_error <= expected_lse.abs() * 1e-5 + 2e-4).all().item<bool>())
          << "max |lse error| " << lse_error.max().item<double>();
    }
  }
}

// An infinite key element among the first scores of every row (those that seed a row's maximum on the AMX route):
// rows whose score there is +inf give NaN and rows whose score is -inf leave that key out, as in float64.
TEST(Bf16Route, InfiniteScoresAmongARowsFirstKeysOnEachRoute) {
  if (skip_without_bf16_route()) return;
  torch::manual_seed(13);
  const auto f64 = [](const torch::Tensor& t) { return t.to(torch::kBFloat16).to(torch::kFloat64); };
  const torch::Tensor q = torch::randn({1, 2, 40, 64}), v = torch::randn({1, 2, 900, 64});
  torch::Tensor k = torch::randn({1, 2, 900, 64});
  k[0][0][3][5] = std::numeric_limits<float>::infinity();
  const torch::Tensor expected =
      torch::matmul(torch::softmax(torch::matmul(f64(q), f64(k).transpose(-2, -1)) / 8.0, -1), f64(v));
  const torch::Tensor nan_rows = expected.isnan().any(-1);
  // Both kinds of row are there: q's element 5 takes both signs.
  ASSERT_GT(nan_rows[0][0].sum().item<int64_t>(), 0);
  ASSERT_LT(nan_rows[0][0].sum().item<int64_t>(), 40);
  for (const bool amx : own_routes()) {
    SCOPED_TRACE(amx ? "AMX tiles" : "pairs");
    Bf16RouteScope route(amx);
    const auto bf = [](const torch::Tensor& t) { return t.to(torch::kBFloat16); };
    const torch::Tensor got =
        scaled_dot_product_attention(bf(q), bf(k), bf(v), SdpaOptions().backend(Backend::Fused)).to(torch::kFloat64);
    EXPECT_TRUE(torch::equal(got.isnan().any(-1), nan_rows));
    const torch::Tensor finite = ~nan_rows.unsqueeze(-1).expand_as(expected);
    const double size = expected.masked_select(finite).abs().mean().item<double>();
    EXPECT_LE((got - expected).masked_select(finite).abs().max().item<double>(), 0.1 * size);
    EXPECT_LE((got - expected).masked_select(finite).abs().mean().item<double>(), 4e-3 * size);
  }
}

// A prefill over a KV cache as the cache's call makes it (backends/cache.cpp): grouped heads, the keys and values
// the used prefix of [B, H_kv, capacity, d] buffers (rows a head apart by the capacity, not by the length), and
// bottom-right causality, on each of bfloat16's own routes, against float64 on the same rounded values.
TEST(Bf16Route, PrefillOverACacheOnEachRoute) {
  if (skip_without_bf16_route()) return;
  torch::manual_seed(8);
  const int64_t capacity = 1024, used = 700;
  const auto bf = [](const torch::Tensor& t) { return t.to(torch::kBFloat16); };
  const torch::Tensor q = bf(torch::randn({2, 6, 300, 64}));
  const torch::Tensor k_cache = bf(torch::randn({2, 2, capacity, 64})), v_cache = bf(torch::randn({2, 2, capacity, 64}));
  const torch::Tensor k = k_cache.narrow(2, 0, used), v = v_cache.narrow(2, 0, used);
  ASSERT_FALSE(k.is_contiguous());
  const auto opts = SdpaOptions().causal(true).causal_alignment(CausalAlignment::BottomRight);
  const torch::Tensor expected = scaled_dot_product_attention(
      q.to(torch::kFloat64), k.to(torch::kFloat64), v.to(torch::kFloat64), SdpaOptions(opts).backend(Backend::Math));
  const double size = expected.abs().mean().item<double>();
  for (const bool amx : own_routes()) {
    SCOPED_TRACE(amx ? "AMX tiles" : "pairs");
    Bf16RouteScope route(amx);
    const torch::Tensor got =
        scaled_dot_product_attention(q, k, v, SdpaOptions(opts).backend(Backend::Fused)).to(torch::kFloat64);
    EXPECT_LE((got - expected).abs().max().item<double>(), 0.1 * size);
    EXPECT_LE((got - expected).abs().mean().item<double>(), 4e-3 * size);
  }
}

// A prefill over a KVCache whose rows hold different prefixes (400 and 100 earlier positions, then 300 new
// ones each): attention_with_kv_cache gives the general backends the cache rule as a mask (backends/cache.cpp),
// and the fused kernel takes it on each of bfloat16's own routes, against float64 on the same bfloat16 values.
TEST(Bf16Route, RaggedPrefillThroughTheCacheOnEachRoute) {
  if (skip_without_bf16_route()) return;
  torch::NoGradGuard no_grad;
  torch::manual_seed(13);
  const int64_t B = 2, H = 6, H_kv = 2, tq = 300, d = 64, capacity = 1024;
  const std::vector<int64_t> earlier{400, 100}, lengths{700, 400};
  KVCache cache(KVCacheOptions(1, B, H_kv, d, capacity).dtype(torch::kBFloat16));
  const torch::Tensor k = torch::randn({B, H_kv, 700, d}).to(torch::kBFloat16);
  const torch::Tensor v = torch::randn({B, H_kv, 700, d}).to(torch::kBFloat16);
  cache.append(0, k.narrow(2, 0, 400), v.narrow(2, 0, 400), earlier);
  // Row b's new keys follow its own prefix: row 1's are k[1, :, 100:400].
  const torch::Tensor new_k = torch::stack({k[0].narrow(1, 400, tq), k[1].narrow(1, 100, tq)});
  const torch::Tensor new_v = torch::stack({v[0].narrow(1, 400, tq), v[1].narrow(1, 100, tq)});
  cache.append(0, new_k, new_v);
  ASSERT_EQ(cache.lengths(0).to(torch::kLong).data_ptr<int64_t>()[1], 400);
  const torch::Tensor q = torch::randn({B, H, tq, d}).to(torch::kBFloat16);
  const torch::Tensor expected = std::get<0>(float64_attention(
      q.to(torch::kFloat64), k.to(torch::kFloat64).repeat_interleave(H / H_kv, 1),
      v.to(torch::kFloat64).repeat_interleave(H / H_kv, 1), cache_allowed_pairs(earlier, lengths, tq, 700, true),
      1.0 / std::sqrt(double(d))));
  // Row 1 holds 400 keys: its keys past 400 in k are not in the cache, and the reference masks them.
  const double size = expected.abs().mean().item<double>();
  for (const bool amx : own_routes()) {
    SCOPED_TRACE(amx ? "AMX tiles" : "pairs");
    Bf16RouteScope route(amx);
    const torch::Tensor got = attention_with_kv_cache(q, cache, 0, longs(earlier),
                                                      SdpaOptions().causal(true).backend(Backend::Fused));
    const torch::Tensor error = (got.to(torch::kFloat64) - expected).abs();
    EXPECT_LE(error.max().item<double>(), 0.1 * size);
    EXPECT_LE(error.mean().item<double>(), 4e-3 * size);
  }
}

// The decode kernel's steps of many query rows per K/V head (a group of 8 times 4 tokens: 32 rows), widened
// and on AMX's tiles, against float64 on the same bfloat16 values: a contiguous cache and a paged one whose
// blocks of 5 rows are gathered (the tiles then read a copy), lengths across the 256-key splits. The tiles round
// P to bfloat16 where the widened route keeps it in float, and stay within the fused bfloat16 route's bounds.
TEST(Bf16Route, DecodeStepsOfManyRowsOnEachRoute) {
  if (skip_without_bf16_route()) return;
  torch::NoGradGuard no_grad;
  torch::manual_seed(12);
  const int64_t B = 2, H = 16, H_kv = 2, tq = 4, d = 64;
  const std::vector<int64_t> lengths{1000, 300};
  KVCache contiguous(KVCacheOptions(1, B, H_kv, d, 1024).dtype(torch::kBFloat16));
  PagedKVCache paged(PagedKVCacheOptions(1, H_kv, d, 2 * 1024 / 5 + 8, 5).dtype(torch::kBFloat16).run_positions(1));
  const std::vector<int64_t> ids{paged.add_sequence(), paged.add_sequence()};
  const torch::Tensor k = torch::randn({B, H_kv, 1000, d}).to(torch::kBFloat16);
  const torch::Tensor v = torch::randn({B, H_kv, 1000, d}).to(torch::kBFloat16);
  contiguous.append(0, k, v, lengths);
  for (int64_t at = 0; at < lengths[0]; at += 5) {  // in turn, a block at a time: gathered through the table
    for (int64_t b = 0; b < B; ++b) {
      const int64_t n = std::clamp<int64_t>(lengths[b] - at, 0, 5);
      if (n > 0) paged.append(0, {ids[b]}, k.narrow(0, b, 1).narrow(2, at, n), v.narrow(0, b, 1).narrow(2, at, n));
    }
  }
  const torch::Tensor q = torch::randn({B, H, tq, d}).to(torch::kBFloat16);
  std::vector<int64_t> starts;
  for (int64_t l : lengths) starts.push_back(l - tq);
  const torch::Tensor expected = std::get<0>(float64_attention(
      q.to(torch::kFloat64), k.to(torch::kFloat64).repeat_interleave(H / H_kv, 1),
      v.to(torch::kFloat64).repeat_interleave(H / H_kv, 1), cache_allowed_pairs(starts, lengths, tq, 1000, true),
      1.0 / std::sqrt(double(d))));
  const double size = expected.abs().mean().item<double>();
  std::vector<bool> tiles{false};
  if (amx_runs_here("only the widened decode was checked")) tiles.push_back(true);
  for (const bool amx : tiles) {
    const AmxTilesScope scope(amx);
    ASSERT_EQ(cpu_kernel_info().bfloat16_decode, amx ? "amx" : "widened");
    const auto causal = SdpaOptions().causal(true);
    const torch::Tensor from_contiguous = attention_with_kv_cache(q, contiguous, 0, longs(starts), causal);
    const torch::Tensor from_paged = attention_with_kv_cache(q, paged, paged.batch(0, ids), longs(starts), causal);
    for (const auto& [name, got] : {std::pair<const char*, torch::Tensor>{"contiguous", from_contiguous},
                                    std::pair<const char*, torch::Tensor>{"paged", from_paged}}) {
      SCOPED_TRACE(std::string(amx ? "AMX tiles, " : "widened, ") + name);
      const torch::Tensor error = (got.to(torch::kFloat64) - expected).abs();
      std::printf("[ NOTE     ] decode, %s cache, %s: mean error %.2e, max %.2e of the mean size\n", name,
                  amx ? "AMX tiles" : "widened", error.mean().item<double>() / size, error.max().item<double>() / size);
      EXPECT_LE(error.max().item<double>(), 0.1 * size);
      EXPECT_LE(error.mean().item<double>(), 4e-3 * size);
    }
  }
}

// The route's backward pass, forced on, against float64 autograd on the same rounded inputs, and against the
// widened route. Relative to each gradient's mean size.
TEST(Bf16Route, BackwardAgreesWithFloat64AndWithTheWidenedRoute) {
  torch::manual_seed(5);
  const auto bf = [](const torch::Tensor& t) { return t.to(torch::kBFloat16); };
  const torch::Tensor q = bf(torch::randn({2, 4, 300, 64})), k = bf(torch::randn({2, 2, 700, 64})),
                      v = bf(torch::randn({2, 2, 700, 64})), cotangent = bf(torch::randn({2, 4, 300, 64}));
  for (bool causal : {false, true}) {
    SCOPED_TRACE(causal ? "causal" : "not causal");
    const auto grads = [&](torch::Dtype dtype, Backend backend) {
      const auto leaf = [&](const torch::Tensor& t) { return t.to(dtype).clone().requires_grad_(); };
      torch::Tensor ql = leaf(q), kl = leaf(k), vl = leaf(v);
      const torch::Tensor out =
          scaled_dot_product_attention(ql, kl, vl, SdpaOptions().causal(causal).backend(backend));
      (out * cotangent.to(dtype)).sum().backward();
      return std::vector<torch::Tensor>{ql.grad().to(torch::kFloat64), kl.grad().to(torch::kFloat64),
                                        vl.grad().to(torch::kFloat64)};
    };
    const auto expected = grads(torch::kFloat64, Backend::Math);
    std::vector<torch::Tensor> widened, paired;
    {
      CapabilityScope scope(Capability::Avx512);
      widened = grads(torch::kBFloat16, Backend::Fused);
    }
    const char* names[] = {"d query", "d key", "d value"};
    for (int i = 0; i < 3; ++i) {
      // bfloat16 output rounding alone is up to 2^-9 of each value on average.
      const double size = expected[i].abs().mean().item<double>();
      EXPECT_LE((widened[i] - expected[i]).abs().mean().item<double>(), 3e-3 * size) << names[i];
    }
    if (!cpu_has_bf16_route()) {
      std::printf("[ NOTE     ] this CPU has no AVX512-BF16: only the widened route was checked\n");
      continue;
    }
    for (const bool amx : own_routes()) {
      Bf16RouteScope route(amx);
      paired = grads(torch::kBFloat16, Backend::Fused);
      for (int i = 0; i < 3; ++i) {
        SCOPED_TRACE(names[i]);
        const double size = expected[i].abs().mean().item<double>();
        const double mean = (paired[i] - expected[i]).abs().mean().item<double>() / size;
        const double max = (paired[i] - expected[i]).abs().max().item<double>() / size;
        std::printf("[ NOTE     ] %s, %s, bfloat16 route on %s: mean error %.2e, max %.2e of the mean size\n",
                    causal ? "causal" : "not causal", names[i], amx ? "AMX tiles" : "pairs", mean, max);
        // Rounding P and dS for the products: not bit for bit the widened route's gradients.
        EXPECT_GT((paired[i] - widened[i]).abs().max().item<double>(), 0.0);
        // Measured 2.3e-3 and up to 5e-2 (the widened route: 1.4e-3); a 1 % error in any product fails.
        EXPECT_LE(mean, 4e-3);
        EXPECT_LE(max, 0.1);
      }
    }
  }
}

// The AMX route packs K, V, Q and dO into buffers that the calling thread keeps for its next call, up to 8 MB each
// (products/kept_buffer.h). Calls in turn that grow the kept buffers, run in larger ones, and pack past 8 MB (a
// buffer of their own, freed with the call): each call's output and gradients against PyTorch's attention in
// float64 on the same bfloat16 values, so that a call that read a pack of another shape, or of the call before,
// would fail. The pairs route, which keeps nothing, runs the same calls; on a CPU without AMX only it does.
TEST(Bf16Route, PacksKeptBetweenCallsOfEverySize) {
  if (skip_without_bf16_route()) return;
  torch::manual_seed(11);
  struct Shape {
    int64_t batch, heads, keys;
  };
  // 64 x 8 heads of 160 keys of 64: K packed is 10.5 MB, past what a thread keeps.
  const std::vector<Shape> shapes = {{1, 2, 96}, {4, 4, 512}, {1, 2, 96}, {64, 8, 160}, {2, 4, 300}};
  for (const bool amx : own_routes()) {
    Bf16RouteScope route(amx);
    for (const Shape& shape : shapes) {
      SCOPED_TRACE(std::string(amx ? "AMX tiles, " : "pairs, ") + std::to_string(shape.batch) + " x " +
                   std::to_string(shape.heads) + " heads, " + std::to_string(shape.keys) + " keys");
      const auto draw = [&] {
        return torch::randn({shape.batch, shape.heads, shape.keys, 64}).to(torch::kBFloat16);
      };
      const torch::Tensor q = draw(), k = draw(), v = draw(), cotangent = draw();
      const auto fused = [](const torch::Tensor& ql, const torch::Tensor& kl, const torch::Tensor& vl) {
        return scaled_dot_product_attention(ql, kl, vl, SdpaOptions().backend(Backend::Fused));
      };
      for (const auto& [name, mean, max] : errors_against_float64(q, k, v, cotangent, fused)) {
        std::printf("[ NOTE     ] %s route, %lld x %lld heads of %lld keys, %s: mean error %.2e, max %.2e of the "
                    "mean size\n",
                    amx ? "AMX" : "pairs", static_cast<long long>(shape.batch), static_cast<long long>(shape.heads),
                    static_cast<long long>(shape.keys), name, mean, max);
        // The mean bound of the route's forward and backward tests above; the largest of 5 million errors lies
        // further out in rounding's tail than the largest of theirs (measured up to 0.14 of the mean size).
        EXPECT_LE(mean, 4e-3) << name;
        EXPECT_LE(max, 0.25) << name;
      }
    }
  }
}

// A NaN or Inf at a masked key or value stays out of the route's output and gradients, as on the float route
// (FusedKernelReference.NonFiniteValuesAtMaskedKeysStayOut).
TEST(Bf16Route, NonFiniteValuesAtMaskedKeysStayOut) {
  if (skip_without_bf16_route()) return;
  torch::manual_seed(4);
  const torch::Tensor finite_k = torch::randn({1, 1, 301, 8});
  torch::Tensor k = finite_k.clone(), v = torch::randn({1, 1, 301, 8});
  torch::Tensor padding = torch::zeros({1, 1, 301}, torch::kBool);
  for (int64_t j : {3, 128, 150, 299, 300}) padding.index_put_({0, 0, j}, true);
  k.index_put_({0, 0, 3}, NAN);
  k.index_put_({0, 0, 128}, INFINITY);
  v.index_put_({0, 0, 150}, INFINITY);
  v.index_put_({0, 0, 299}, NAN);
  v.index_put_({0, 0, 300}, NAN);
  const auto leaf = [](const torch::Tensor& t) { return t.to(torch::kBFloat16).requires_grad_(); };
  const AttentionMasks masks = AttentionMasks().key_padding_mask(padding);
  for (const bool amx : own_routes()) {
    // 96 query rows and finite keys: whole chunks of 32 in key blocks of 128, whose dS the AMX route forms in
    // one pass from P and dP (grad_scores), with the Inf of value 150 in dP at a blocked pair.
    for (const auto& [queries, keys] : {std::pair<int64_t, torch::Tensor>{70, k}, {96, k}, {96, finite_k}}) {
      SCOPED_TRACE(::testing::Message() << (amx ? "AMX tiles" : "pairs") << ", " << queries << " queries, "
                                        << (keys.isfinite().all().item<bool>() ? "finite" : "non-finite") << " keys");
      Bf16RouteScope route(amx);
      const torch::Tensor ql = leaf(torch::randn({1, 1, queries, 8})), kl = leaf(keys), vl = leaf(v);
      const torch::Tensor out =
          scaled_dot_product_attention(ql, kl, vl, SdpaOptions().masks(masks).backend(Backend::Fused));
      EXPECT_TRUE(torch::isfinite(out).all().item<bool>());
      out.sum().backward();
      for (const torch::Tensor& g : {ql.grad(), kl.grad(), vl.grad()}) {
        EXPECT_TRUE(torch::isfinite(g).all().item<bool>());
      }
    }
  }
}

// Rows just past a tile's band: a value past a causal query block's last key, and a gradient row of a query that
// a key block's window never reaches. The products' k runs in whole chunks of 32 on AMX, so those rows sit in
// the chunk after the band's last key or query; their Inf and NaN must not meet P's and dS's zeros there.
TEST(Bf16Route, NonFiniteRowsPastATilesBandStayOut) {
  if (skip_without_bf16_route()) return;
  torch::manual_seed(5);
  const auto bf = [](const torch::Tensor& t) { return t.to(torch::kBFloat16); };
  {
    // Bottom-right causal, Tq 40 and Tk 50: query i sees keys up to i + 10, so value 45 is masked for queries 0-34,
    // and the first block of 32 queries ends its keys at 42, inside the chunk of keys 32-63.
    const torch::Tensor q = bf(torch::randn({1, 1, 40, 64})), k = bf(torch::randn({1, 1, 50, 64}));
    torch::Tensor v = bf(torch::randn({1, 1, 50, 64}));
    v.index_put_({0, 0, 45}, INFINITY);
    const auto opts = SdpaOptions().causal(true).causal_alignment(CausalAlignment::BottomRight);
    const torch::Tensor expected =
        scaled_dot_product_attention(q.to(torch::kFloat64), k.to(torch::kFloat64), v.to(torch::kFloat64),
                                     SdpaOptions(opts).backend(Backend::Math)).narrow(2, 0, 35);
    ASSERT_TRUE(torch::isfinite(expected).all().item<bool>());
    for (const bool amx : own_routes()) {
      SCOPED_TRACE(amx ? "AMX tiles, value past the band" : "pairs, value past the band");
      Bf16RouteScope route(amx);
      const torch::Tensor out =
          scaled_dot_product_attention(q, k, v, SdpaOptions(opts).backend(Backend::Fused)).narrow(2, 0, 35);
      ASSERT_TRUE(torch::isfinite(out).all().item<bool>());
      EXPECT_LE((out.to(torch::kFloat64) - expected).abs().max().item<double>(), 0.1 * expected.abs().mean().item<double>());
    }
  }
  {
    // A causal window of 20: keys 0-127 (the first backward key block) are seen by queries 0-147 only, and the
    // gradient row of query 155, NaN, lies in the chunk of queries 128-159.
    const torch::Tensor q = bf(torch::randn({1, 1, 300, 64})), k = bf(torch::randn({1, 1, 300, 64}));
    const torch::Tensor v = bf(torch::randn({1, 1, 300, 64}));
    torch::Tensor cotangent = bf(torch::randn({1, 1, 300, 64}));
    cotangent.index_put_({0, 0, 155}, NAN);
    const auto opts = SdpaOptions().causal(true).window(20, 0).backend(Backend::Fused);
    for (const bool amx : own_routes()) {
      SCOPED_TRACE(amx ? "AMX tiles, gradient row past the window" : "pairs, gradient row past the window");
      Bf16RouteScope route(amx);
      const torch::Tensor ql = q.clone().requires_grad_(), kl = k.clone().requires_grad_(), vl = v.clone().requires_grad_();
      scaled_dot_product_attention(ql, kl, vl, opts).backward(cotangent);
      EXPECT_TRUE(torch::isfinite(kl.grad().narrow(2, 0, 128)).all().item<bool>()) << "d key of keys 0-127";
      EXPECT_TRUE(torch::isfinite(vl.grad().narrow(2, 0, 128)).all().item<bool>()) << "d value of keys 0-127";
      EXPECT_TRUE(torch::isfinite(ql.grad().narrow(2, 0, 155)).all().item<bool>()) << "d query of queries 0-154";
    }
  }
}

// A scale of zero or below: a plain tile's scores cannot stay unscaled with their maxima taken before the scale
// (a negative scale turns the largest score into the smallest), so the route scales them first. Forward and
// backward on each route, against float64 on the same rounded values.
TEST(Bf16Route, ScalesOfZeroAndBelowOnEachRoute) {
  if (skip_without_bf16_route()) return;
  torch::manual_seed(6);
  const auto bf = [](const torch::Tensor& t) { return t.to(torch::kBFloat16); };
  const torch::Tensor q = bf(torch::randn({1, 2, 80, 64})), k = bf(torch::randn({1, 2, 200, 64})),
                      v = bf(torch::randn({1, 2, 200, 64})), cotangent = bf(torch::randn({1, 2, 80, 64}));
  for (const double scale : {0.0, -0.3}) {
    const auto grads = [&](torch::Dtype dtype, Backend backend) {
      const auto leaf = [&](const torch::Tensor& t) { return t.to(dtype).clone().requires_grad_(); };
      torch::Tensor ql = leaf(q), kl = leaf(k), vl = leaf(v);
      const torch::Tensor out = scaled_dot_product_attention(ql, kl, vl, SdpaOptions().scale(scale).backend(backend));
      (out * cotangent.to(dtype)).sum().backward();
      return std::vector<torch::Tensor>{out.to(torch::kFloat64), ql.grad().to(torch::kFloat64),
                                        kl.grad().to(torch::kFloat64), vl.grad().to(torch::kFloat64)};
    };
    const auto expected = grads(torch::kFloat64, Backend::Math);
    for (const bool amx : own_routes()) {
      SCOPED_TRACE(std::string(amx ? "AMX tiles" : "pairs") + ", scale " + std::to_string(scale));
      Bf16RouteScope route(amx);
      const auto actual = grads(torch::kBFloat16, Backend::Fused);
      const char* names[] = {"output", "d query", "d key", "d value"};
      for (int i = 0; i < 4; ++i) {
        // At scale 0, d query and d key are 0 in float64 up to rounding: their bound is the cotangent's size.
        const double size = scale == 0.0 && (i == 1 || i == 2) ? 1.0 : expected[i].abs().mean().item<double>();
        EXPECT_LE((actual[i] - expected[i]).abs().mean().item<double>(), 4e-3 * size) << names[i];
        EXPECT_LE((actual[i] - expected[i]).abs().max().item<double>(), 0.1 * size) << names[i];
      }
    }
  }
}

// Without a mask, a NaN or Inf in the values reaches every query's output as in float64 (each key's weight is
// above zero): the route's plain tiles must not turn an Inf into NaN, nor drop it.
TEST(Bf16Route, NonFiniteValuesWithoutAMaskReachTheOutputAsInFloat64) {
  if (skip_without_bf16_route()) return;
  torch::manual_seed(7);
  const torch::Tensor q = torch::randn({1, 2, 40, 16}), k = torch::randn({1, 2, 100, 16});
  torch::Tensor v = torch::randn({1, 2, 100, 16});
  v.index_put_({0, 0, 5, 0}, INFINITY);
  v.index_put_({0, 0, 70, 1}, -INFINITY);
  v.index_put_({0, 1, 99, 3}, NAN);
  const auto bf = [](const torch::Tensor& t) { return t.to(torch::kBFloat16); };
  const torch::Tensor expected = scaled_dot_product_attention(bf(q).to(torch::kFloat64), bf(k).to(torch::kFloat64),
                                                              bf(v).to(torch::kFloat64), SdpaOptions().backend(Backend::Math));
  ASSERT_TRUE(torch::isinf(expected.select(3, 0)).select(1, 0).all().item<bool>());
  ASSERT_TRUE(torch::isnan(expected.select(3, 3)).select(1, 1).all().item<bool>());
  const torch::Tensor finite = torch::isfinite(expected);
  for (const bool amx : own_routes()) {
    SCOPED_TRACE(amx ? "AMX tiles" : "pairs");
    Bf16RouteScope route(amx);
    const torch::Tensor out =
        scaled_dot_product_attention(bf(q), bf(k), bf(v), SdpaOptions().backend(Backend::Fused)).to(torch::kFloat64);
    EXPECT_TRUE(torch::equal(torch::isnan(out), torch::isnan(expected)));
    EXPECT_TRUE(torch::equal(torch::isinf(out) & (out > 0), torch::isinf(expected) & (expected > 0)));
    EXPECT_TRUE(torch::equal(torch::isinf(out) & (out < 0), torch::isinf(expected) & (expected < 0)));
    const torch::Tensor error = (out - expected).masked_select(finite).abs();
    EXPECT_LE(error.max().item<double>(), 0.1 * expected.masked_select(finite).abs().mean().item<double>());
  }
}

// Values of width zero (d_v = 0, which the contract allows): an empty output, the log-sum-exp of float64's scores,
// and gradients of zero for the queries and keys, forward and backward, in float32 and on each bfloat16 route.
TEST(Bf16Route, ValuesOfWidthZeroOnEachRoute) {
  torch::manual_seed(8);
  const torch::Tensor q = torch::randn({1, 2, 50, 32}), k = torch::randn({1, 2, 70, 32});
  for (const torch::Dtype dtype : {torch::kFloat32, torch::kBFloat16}) {
    const torch::Tensor qd = q.to(dtype), kd = k.to(dtype);
    const torch::Tensor scores = torch::matmul(qd.to(torch::kFloat64), kd.to(torch::kFloat64).transpose(-2, -1)) /
                                 std::sqrt(32.0);
    const auto [out, lse] = ops::flash_attention(qd, kd, torch::zeros({1, 2, 70, 0}, dtype));
    EXPECT_EQ(out.sizes(), (std::vector<int64_t>{1, 2, 50, 0}));
    EXPECT_LE((lse.to(torch::kFloat64) - torch::logsumexp(scores, -1)).abs().max().item<double>(), 1e-4)
        << c10::toString(dtype);
  }
  if (skip_without_bf16_route()) return;
  const auto leaf = [](const torch::Tensor& t) { return t.to(torch::kBFloat16).requires_grad_(); };
  for (const bool amx : own_routes()) {
    SCOPED_TRACE(amx ? "AMX tiles" : "pairs");
    Bf16RouteScope route(amx);
    for (const bool causal : {false, true}) {
      const torch::Tensor q = leaf(torch::randn({1, 2, 50, 32})), k = leaf(torch::randn({1, 2, 70, 32})),
                          v = leaf(torch::randn({1, 2, 70, 0}));
      const torch::Tensor out =
          scaled_dot_product_attention(q, k, v, SdpaOptions().causal(causal).backend(Backend::Fused));
      EXPECT_EQ(out.sizes(), (std::vector<int64_t>{1, 2, 50, 0}));
      out.sum().backward();
      ASSERT_TRUE(q.grad().defined() && k.grad().defined() && v.grad().defined());
      EXPECT_EQ(q.grad().count_nonzero().item<int64_t>(), 0);
      EXPECT_EQ(k.grad().count_nonzero().item<int64_t>(), 0);
      EXPECT_EQ(v.grad().sizes(), v.sizes());
    }
  }
}

// The backward op called directly with a float32 dO for bfloat16 inputs: dO cannot be read as pairs, so it
// widens, and the gradients agree with those of the same dO rounded to bfloat16 on the route.
TEST(Bf16Route, BackwardOpWithAFloatGradOutputWidens) {
  if (skip_without_bf16_route()) return;
  torch::manual_seed(8);
  const auto bf = [](at::IntArrayRef shape) { return torch::randn(shape).to(torch::kBFloat16); };
  const torch::Tensor q = bf({1, 2, 40, 16}), k = bf({1, 2, 60, 16}), v = bf({1, 2, 60, 16});
  const torch::Tensor grad_float = torch::randn({1, 2, 40, 16});
  for (const bool amx : own_routes()) {
    SCOPED_TRACE(amx ? "AMX tiles" : "pairs");
    Bf16RouteScope route(amx);
    const auto [out, lse] = ops::flash_attention(q, k, v);
    const auto widened = ops::flash_attention_backward(grad_float, q, k, v, out, lse);
    const auto on_route = ops::flash_attention_backward(grad_float.to(torch::kBFloat16), q, k, v, out, lse);
    for (const auto& [a, b] : {std::pair{std::get<0>(widened), std::get<0>(on_route)},
                               {std::get<1>(widened), std::get<1>(on_route)},
                               {std::get<2>(widened), std::get<2>(on_route)}}) {
      EXPECT_EQ(a.scalar_type(), torch::kBFloat16);
      const torch::Tensor x = a.to(torch::kFloat64), y = b.to(torch::kFloat64);
      EXPECT_LE((x - y).abs().mean().item<double>(), 1e-2 * y.abs().mean().item<double>());
    }
  }
}

// The backward op called directly with the forward's output in float32 for bfloat16 inputs: O, which the pass
// reads for each row's delta, cannot be read as bfloat16, so the pass widens; the gradients match float64's.
TEST(Bf16Route, BackwardOpWithAFloatOutputWidens) {
  torch::manual_seed(9);
  const auto bf = [](at::IntArrayRef shape) { return torch::randn(shape).to(torch::kBFloat16); };
  const torch::Tensor q = bf({1, 2, 40, 16}), k = bf({1, 2, 60, 16}), v = bf({1, 2, 60, 16});
  const torch::Tensor dout = bf({1, 2, 40, 16});
  const auto [out, lse] = ops::flash_attention(q, k, v);
  const auto [dq, dk, dv, dsinks] = ops::flash_attention_backward(dout, q, k, v, out.to(torch::kFloat32), lse);
  const auto exact = [](const torch::Tensor& t) { return t.to(torch::kFloat64).requires_grad_(); };
  const torch::Tensor q64 = exact(q), k64 = exact(k), v64 = exact(v);
  scaled_dot_product_attention(q64, k64, v64, SdpaOptions().backend(Backend::Math)).backward(dout.to(torch::kFloat64));
  for (const auto& [got, want] : {std::pair{dq, q64.grad()}, {dk, k64.grad()}, {dv, v64.grad()}}) {
    EXPECT_EQ(got.scalar_type(), torch::kBFloat16);
    EXPECT_LE((got.to(torch::kFloat64) - want).abs().mean().item<double>(), 1e-2 * want.abs().mean().item<double>());
  }
}

// An odd d_v cannot be read in pairs along dO·Vᵀ: the backward pass widens, whatever the forward pass did.
TEST(Bf16Route, BackwardWithOddValueWidthWidens) {
  torch::manual_seed(6);
  const auto leaf = [](at::IntArrayRef shape) { return torch::randn(shape).to(torch::kBFloat16).requires_grad_(); };
  const torch::Tensor q = leaf({1, 2, 50, 64}), k = leaf({1, 2, 70, 64}), v = leaf({1, 2, 70, 33});
  CapabilityScope scope(Capability::Avx512Bf16);
  const torch::Tensor out = scaled_dot_product_attention(q, k, v, SdpaOptions().causal(true).backend(Backend::Fused));
  out.sum().backward();
  const auto exact = [](const torch::Tensor& t) { return t.detach().to(torch::kFloat64).requires_grad_(); };
  const torch::Tensor q64 = exact(q), k64 = exact(k), v64 = exact(v);
  scaled_dot_product_attention(q64, k64, v64, SdpaOptions().causal(true).backend(Backend::Math)).sum().backward();
  for (const auto& [got, want] : {std::pair{q.grad(), q64.grad()}, {k.grad(), k64.grad()}, {v.grad(), v64.grad()}}) {
    EXPECT_EQ(got.scalar_type(), torch::kBFloat16);
    EXPECT_LE((got.to(torch::kFloat64) - want).abs().mean().item<double>(), 4e-3 * want.abs().mean().item<double>());
  }
}

}  // namespace
}  // namespace attn::test
