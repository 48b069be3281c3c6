// AMX's tile instructions in software (src/ops/cpu/products/amx_emulation.h), which a test build under
// ATTN_AMX_EMULATION runs the AMX route on: the instructions' arithmetic against float64 and against what Intel's
// manual says TDPBF16PS does with denormals, and the faults the CPU would raise. Compiled only in such a build;
// the software is compiled for AVX-512 as the route is, so a CPU without AVX512-BF16 skips these, saying so (the
// suite Amx, a CPU extension's: cmake/gtest_suites_discover.cmake).

#include "kernel_variants.h"
#include "ops/cpu/isa/capability.h"
#include "ops/cpu/products/amx_emulation.h"

#include <gtest/gtest.h>

#include <c10/util/BFloat16.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

namespace attn::test {
namespace {

namespace emulation = attn::ops::cpu::amx_emulation;

constexpr int kRows = 16, kPairs = 16, kColumns = 16;

/// Palette 1 with tiles 0 (C: 16 rows of 16 floats), 1 (A: 16 rows of 16 pairs) and 2 (B: `b_rows` rows of 16
/// pairs), 64 bytes a row.
std::vector<uint8_t> three_tiles(int b_rows = kPairs) {
  std::vector<uint8_t> config(64, 0);
  config[0] = 1;
  const uint16_t bytes = 64;
  const int rows[3] = {kRows, kRows, b_rows};
  for (int t = 0; t < 3; ++t) {
    std::memcpy(config.data() + 16 + 2 * t, &bytes, sizeof bytes);
    config[48 + t] = static_cast<uint8_t>(rows[t]);
  }
  return config;
}

/// c + a · b on tiles 0 (c), 1 (a: 16 rows of 16 pairs) and 2 (b: 16 rows of 16 pairs) of three_tiles().
std::vector<float> product_on_tiles(const std::vector<float>& c, const std::vector<c10::BFloat16>& a,
                                    const std::vector<c10::BFloat16>& b) {
  const std::vector<uint8_t> config = three_tiles();
  emulation::load_config(config.data());
  emulation::load(0, c.data(), kColumns * sizeof(float));
  emulation::load(1, a.data(), 2 * kPairs * sizeof(c10::BFloat16));
  emulation::load(2, b.data(), 2 * kColumns * sizeof(c10::BFloat16));
  emulation::dot_bf16(0, 1, 2);
  std::vector<float> out(c.size(), -1.0f);
  emulation::store(0, out.data(), kColumns * sizeof(float));
  emulation::release();
  return out;
}

c10::BFloat16 from_bits(uint16_t bits) {
  c10::BFloat16 v;
  v.x = bits;
  return v;
}

TEST(Amx, EmulatedProductMatchesFloat64WithDenormalsAsTheInstructionTreatsThem) {
  if (!ops::cpu::hardware_has_amx()) GTEST_SKIP() << amx_absence();
  std::mt19937 rng(32);
  std::normal_distribution<float> normal;
  std::vector<c10::BFloat16> a(kRows * 2 * kPairs), b(kPairs * 2 * kColumns);
  std::vector<float> c(kRows * kColumns);
  for (auto& v : a) v = c10::BFloat16(normal(rng));
  for (auto& v : b) v = c10::BFloat16(normal(rng));
  for (auto& v : c) v = normal(rng);
  // Row 0, column 0: only a denormal input (2^-133) times 2^100, which the instruction reads as zero. Row 1,
  // column 1: only 2^-70 · 2^-70 = 2^-140, a denormal float, which it flushes to zero.
  for (int k = 0; k < 2 * kPairs; ++k) a[0 * 2 * kPairs + k] = a[1 * 2 * kPairs + k] = c10::BFloat16(0.0f);
  a[0] = from_bits(0x0001);
  b[0] = c10::BFloat16(std::ldexp(1.0f, 100));
  a[1 * 2 * kPairs] = c10::BFloat16(std::ldexp(1.0f, -70));
  b[2 * 1] = c10::BFloat16(std::ldexp(1.0f, -70));
  c[0] = 0.0f;
  c[1 * kColumns + 1] = 0.0f;

  std::vector<float> expected(c.begin(), c.end()), magnitude(c.size());
  for (int m = 0; m < kRows; ++m) {
    for (int n = 0; n < kColumns; ++n) {
      double sum = c[m * kColumns + n], size = std::fabs(sum);
      for (int k = 0; k < 2 * kPairs; ++k) {
        const double term = static_cast<double>(static_cast<float>(a[m * 2 * kPairs + k])) *
                            static_cast<float>(b[(k / 2) * 2 * kColumns + 2 * n + k % 2]);
        sum += term;
        size += std::fabs(term);
      }
      expected[m * kColumns + n] = static_cast<float>(sum);
      magnitude[m * kColumns + n] = static_cast<float>(size);
    }
  }
  // The float64 sums see both small products; the instruction must not.
  ASSERT_GT(expected[0], 0.0f);
  ASSERT_GT(expected[1 * kColumns + 1], 0.0f);

  const std::vector<float> out = product_on_tiles(c, a, b);

  EXPECT_EQ(out[0], 0.0f) << "a denormal bfloat16 input is read as zero";
  EXPECT_EQ(out[1 * kColumns + 1], 0.0f) << "a denormal float sum is flushed to zero";
  for (int i = 0; i < kRows * kColumns; ++i) {
    if (i == 0 || i == 1 * kColumns + 1) continue;
    // 33 float roundings at most, each within 2^-24 of the running sum's size.
    EXPECT_NEAR(out[i], expected[i], 33 * std::ldexp(1.0, -24) * magnitude[i]) << "element " << i;
  }
}

// Intel's order, not the running sum's: the pairs' first products in one sum and their second in another, each
// from zero. Two pairs of ±1.5 · 2^127 overflow each sum, one to +Inf and one to -Inf, whose sum is NaN; added
// one after another they would cancel to 0.
TEST(Amx, EmulatedProductSumsThePairsInTheManualsOrder) {
  if (!ops::cpu::hardware_has_amx()) GTEST_SKIP() << amx_absence();
  std::vector<c10::BFloat16> a(kRows * 2 * kPairs, c10::BFloat16(0.0f)), b(kPairs * 2 * kColumns, c10::BFloat16(0.0f));
  const float big = 1.5f * std::ldexp(1.0f, 127);
  for (int k = 0; k < 2; ++k) {
    a[2 * k] = c10::BFloat16(big);        // row 0, pair k, first
    a[2 * k + 1] = c10::BFloat16(-big);   // row 0, pair k, second
    b[k * 2 * kColumns + 0] = c10::BFloat16(1.0f);  // pair k, column 0, first
    b[k * 2 * kColumns + 1] = c10::BFloat16(1.0f);  // pair k, column 0, second
  }
  const std::vector<float> c = product_on_tiles(std::vector<float>(kRows * kColumns, 0.0f), a, b);
  EXPECT_TRUE(std::isnan(c[0])) << c[0];
  EXPECT_EQ(c[1], 0.0f);
}

TEST(Amx, EmulatedStoresWriteOnlyTheConfiguredRowsAndBytes) {
  if (!ops::cpu::hardware_has_amx()) GTEST_SKIP() << amx_absence();
  std::vector<uint8_t> config = three_tiles();
  config[48 + 0] = 3;       // C: 3 rows
  const uint16_t bytes = 8;  // of 2 floats
  std::memcpy(config.data() + 16, &bytes, sizeof bytes);
  std::vector<float> source(kRows * kColumns);
  for (size_t i = 0; i < source.size(); ++i) source[i] = static_cast<float>(i + 1);
  std::vector<float> out(kRows * kColumns, -1.0f);
  emulation::load_config(config.data());
  emulation::load(0, source.data(), kColumns * sizeof(float));
  emulation::store(0, out.data(), kColumns * sizeof(float));
  emulation::release();
  for (int r = 0; r < kRows; ++r) {
    for (int col = 0; col < kColumns; ++col) {
      const bool written = r < 3 && col < 2;
      EXPECT_EQ(out[r * kColumns + col], written ? source[r * kColumns + col] : -1.0f) << r << ", " << col;
    }
  }
}

TEST(Amx, EmulatedTilesFaultWhereTheCpuWould) {
  if (!ops::cpu::hardware_has_amx()) GTEST_SKIP() << amx_absence();
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  std::vector<float> buffer(kRows * kColumns);
  const std::vector<uint8_t> config = three_tiles();
  EXPECT_DEATH(emulation::load(0, buffer.data(), 64), "no tile configuration is loaded");
  EXPECT_DEATH(
      {
        emulation::load_config(config.data());
        emulation::dot_bf16(0, 1, 1);
      },
      "its three tiles must differ");
  EXPECT_DEATH(
      {
        emulation::load_config(config.data());
        emulation::zero(5);
      },
      "the tile has no rows");
  const std::vector<uint8_t> short_b = three_tiles(/*b_rows=*/8);
  EXPECT_DEATH(
      {
        emulation::load_config(short_b.data());
        emulation::dot_bf16(0, 1, 2);
      },
      "B's rows differ from A's pairs per row");
  std::vector<uint8_t> two_bytes = config;
  const uint16_t two = 2;
  std::memcpy(two_bytes.data() + 16, &two, sizeof two);
  EXPECT_DEATH(
      {
        emulation::load_config(two_bytes.data());
        emulation::load(0, buffer.data(), 64);
      },
      "its bytes per row are not whole dwords");
  std::vector<uint8_t> late_start = config;
  late_start[1] = 16;  // the start row, past tile 0's 16 rows
  EXPECT_DEATH(
      {
        emulation::load_config(late_start.data());
        emulation::store(0, buffer.data(), 64);
      },
      "start row is past its rows");
  std::vector<uint8_t> palette_2 = config;
  palette_2[0] = 2;
  EXPECT_DEATH(emulation::load_config(palette_2.data()), "only palette 1 exists");
}

}  // namespace
}  // namespace attn::test
