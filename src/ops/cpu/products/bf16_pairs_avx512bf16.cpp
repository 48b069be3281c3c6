// The bfloat16 micro-kernel and its packing (ops/cpu/products/bf16_pairs.h). CMake compiles this file alone with
// AVX512-BF16 enabled; the callers reach it only where the CPU has that extension.

#include "ops/cpu/products/bf16_pairs.h"
#include "ops/cpu/products/register_tile_avx512.h"
#include "ops/cpu/products/transpose_16x16.h"
#include "ops/cpu/products/weight_prefetch.h"

#include <c10/util/Exception.h>

#include <immintrin.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstring>

namespace attn::ops::cpu {
namespace {

static_assert(register_tile::kLanes == kPairLanes, "a pairs vector is one register tile vector");

inline __m512i broadcast_pair(const c10::BFloat16* p) {
  int32_t word;
  std::memcpy(&word, p, sizeof(word));
  return _mm512_set1_epi32(word);
}

/// One register tile: R rows of A against NV vectors of B's columns, all `pairs` pairs of k.
template <int R, int NV>
struct PairsTile {
  static void run(int64_t pairs, const LeftOperand& a, const uint32_t* b, int64_t ldb, float alpha, float beta,
                  float* c, int64_t ldc, int64_t cols, float* lane_max, bool first_panel) {
    __m512 acc[R][NV];
    ATTN_UNROLL
    for (int r = 0; r < R; ++r) {
      ATTN_UNROLL
      for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_setzero_ps();
    }
    for (int64_t p = 0; p < pairs; ++p) {
      __m512i bv[NV];
      ATTN_UNROLL
      for (int v = 0; v < NV; ++v) bv[v] = _mm512_loadu_si512(b + p * ldb + v * kPairLanes);
      ATTN_UNROLL
      for (int r = 0; r < R; ++r) {
        const __m512bh av = (__m512bh)broadcast_pair(a.data + r * a.si + p * a.sp);
        ATTN_UNROLL
        for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_dpbf16_ps(acc[r][v], av, (__m512bh)bv[v]);
      }
    }
    register_tile::store<R, NV>(acc, cols, alpha, beta, c, ldc, lane_max, first_panel);
  }
};

inline uint32_t bits(c10::BFloat16 x) { return x.x; }

}  // namespace

void pack_rows_in_pairs(const c10::BFloat16* src, int64_t ld_src, int64_t k, int64_t n, uint32_t* dst,
                        int64_t ld) {
  for (int64_t p = 0; p < (k + 1) / 2; ++p) {
    const c10::BFloat16* r0 = src + 2 * p * ld_src;
    const c10::BFloat16* r1 = 2 * p + 1 < k ? r0 + ld_src : nullptr;
    uint32_t* out = dst + p * ld;
    int64_t j = 0;
    for (; j + 16 <= n; j += 16) {
      const __m512i lo = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(r0 + j)));
      const __m512i hi = r1 ? _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(r1 + j)))
                            : _mm512_setzero_si512();
      _mm512_storeu_si512(out + j, _mm512_or_si512(lo, _mm512_slli_epi32(hi, 16)));
    }
    for (; j < n; ++j) out[j] = bits(r0[j]) | (r1 ? bits(r1[j]) << 16 : 0u);
    std::fill(out + n, out + ld, 0u);
  }
}

void pack_transposed_in_pairs(const c10::BFloat16* src, int64_t ld_src, int64_t n, int64_t k, uint32_t* dst,
                              int64_t ld) {
  const int64_t whole = k / 2;
  // Blocks of 16 rows by 16 pairs go through registers; the edges are copied a word at a time.
  int64_t j0 = 0;
  for (; j0 + 16 <= n; j0 += 16) {
    int64_t p0 = 0;
    for (; p0 + 16 <= whole; p0 += 16) {
      __m512i r[16];
      for (int i = 0; i < 16; ++i) r[i] = _mm512_loadu_si512(src + (j0 + i) * ld_src + 2 * p0);
      transpose_16x16(r);
      for (int i = 0; i < 16; ++i) _mm512_storeu_si512(dst + (p0 + i) * ld + j0, r[i]);
    }
    for (int64_t j = j0; j < j0 + 16; ++j) {
      for (int64_t p = p0; p < whole; ++p) {
        uint32_t word;
        std::memcpy(&word, src + j * ld_src + 2 * p, sizeof(word));
        dst[p * ld + j] = word;
      }
    }
  }
  for (int64_t j = j0; j < n; ++j) {
    const c10::BFloat16* row = src + j * ld_src;
    for (int64_t p = 0; p < whole; ++p) {
      uint32_t word;
      std::memcpy(&word, row + 2 * p, sizeof(word));
      dst[p * ld + j] = word;
    }
  }
  if (k % 2) {
    for (int64_t j = 0; j < n; ++j) dst[whole * ld + j] = bits(src[j * ld_src + k - 1]);
  }
  for (int64_t p = 0; p < (k + 1) / 2; ++p) std::fill(dst + p * ld + n, dst + (p + 1) * ld, 0u);
}

namespace {

/// The dot products of R rows of x with w; two accumulators per row cover vdpbf16ps's latency.
template <int R, bool Prefetch>
void dot_rows(const c10::BFloat16* x, int64_t in, const c10::BFloat16* w, float* s) {
  constexpr int64_t kStep = 2 * kPairLanes;  // bfloat16 per vector
  __m512 acc0[R], acc1[R];
  ATTN_UNROLL
  for (int r = 0; r < R; ++r) acc0[r] = acc1[r] = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 2 * kStep <= in; i += 2 * kStep) {
    if constexpr (Prefetch) {
      prefetch_weights_ahead(w + i, 2 * kStep * static_cast<int64_t>(sizeof(c10::BFloat16)));  // 128 bytes a step
    }
    const __m512bh w0 = (__m512bh)_mm512_loadu_si512(w + i), w1 = (__m512bh)_mm512_loadu_si512(w + i + kStep);
    ATTN_UNROLL
    for (int r = 0; r < R; ++r) {
      acc0[r] = _mm512_dpbf16_ps(acc0[r], (__m512bh)_mm512_loadu_si512(x + r * in + i), w0);
      acc1[r] = _mm512_dpbf16_ps(acc1[r], (__m512bh)_mm512_loadu_si512(x + r * in + i + kStep), w1);
    }
  }
  // The rest in vectors of up to 32, the lanes past `in` loaded as zeros.
  for (; i < in; i += kStep) {
    const int64_t n = std::min(kStep, in - i);
    const __mmask32 mask = static_cast<__mmask32>(n == 32 ? ~0u : (1u << n) - 1u);
    const __m512bh wv = (__m512bh)_mm512_maskz_loadu_epi16(mask, w + i);
    ATTN_UNROLL
    for (int r = 0; r < R; ++r) {
      acc0[r] = _mm512_dpbf16_ps(acc0[r], (__m512bh)_mm512_maskz_loadu_epi16(mask, x + r * in + i), wv);
    }
  }
  ATTN_UNROLL
  for (int r = 0; r < R; ++r) s[r] = _mm512_reduce_add_ps(_mm512_add_ps(acc0[r], acc1[r]));
}

template <bool Prefetch>
void dot_rows_of(int rows, const c10::BFloat16* x, int64_t in, const c10::BFloat16* w, float* s) {
  switch (rows) {
    case 1: return dot_rows<1, Prefetch>(x, in, w, s);
    case 2: return dot_rows<2, Prefetch>(x, in, w, s);
    case 3: return dot_rows<3, Prefetch>(x, in, w, s);
    case 4: return dot_rows<4, Prefetch>(x, in, w, s);
    default: TORCH_INTERNAL_ASSERT(false, "bf16_dot_rows: ", rows, " rows");
  }
}

}  // namespace

void bf16_dot_rows(int rows, const c10::BFloat16* x, int64_t in, const c10::BFloat16* w, bool prefetch, float* s) {
  prefetch ? dot_rows_of<true>(rows, x, in, w, s) : dot_rows_of<false>(rows, x, in, w, s);
}

void bf16_gemm(int64_t m, int64_t n, int64_t pairs, float alpha, LeftOperand a, PairsOperand b, float beta,
               float* c, int64_t ldc, float* lane_max) {
  TORCH_INTERNAL_ASSERT(beta == 0.0f || beta == 1.0f, "bf16_gemm: beta must be 0 or 1, got ", beta);
  register_tile::multiply<PairsTile>(m, n, pairs, alpha, a, register_tile::Panels<uint32_t>{b.data, b.ld}, beta, c, ldc,
                                     lane_max);
}

namespace {

/// Runs `step` (one instruction on each of 12 independent accumulators) `iterations` times; returns seconds.
/// The empty asm makes the accumulators opaque each round, so the compiler keeps every instruction.
template <typename Acc, typename Step>
double time_chains(int64_t iterations, Acc init, const Step& step) {
  Acc a0 = init, a1 = init, a2 = init, a3 = init, a4 = init, a5 = init, a6 = init, a7 = init, a8 = init, a9 = init,
      a10 = init, a11 = init;
  const auto start = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < iterations; ++i) {
    a0 = step(a0), a1 = step(a1), a2 = step(a2), a3 = step(a3), a4 = step(a4), a5 = step(a5);
    a6 = step(a6), a7 = step(a7), a8 = step(a8), a9 = step(a9), a10 = step(a10), a11 = step(a11);
    asm volatile("" : "+v"(a0), "+v"(a1), "+v"(a2), "+v"(a3), "+v"(a4), "+v"(a5), "+v"(a6), "+v"(a7), "+v"(a8),
                 "+v"(a9), "+v"(a10), "+v"(a11));
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

double pair_product_speed() {
  // Each round times the two loops back to back and keeps their ratio; the median of the rounds' ratios is the
  // answer. A neighbour that slows one loop of a round moves that round's ratio only, where the best time of
  // each loop over all rounds could take the two from different moments (bench/RESULTS.md: under load it read
  // 1.23 to 3.10 on a Zen 4 that reads 2.00).
  constexpr int64_t iterations = 2048;
  constexpr int rounds = 21;
  const __m512 x = _mm512_set1_ps(1.0f), y = _mm512_set1_ps(0.5f);
  const __m512bh xp = (__m512bh)_mm512_set1_epi32(0x3F803F80), yp = (__m512bh)_mm512_set1_epi32(0x3F003F00);
  std::array<double, rounds> ratios{};
  for (double& ratio : ratios) {
    const double fma = time_chains(iterations, _mm512_setzero_ps(), [&](__m512 a) { return _mm512_fmadd_ps(x, y, a); });
    const double pairs =
        time_chains(iterations, _mm512_setzero_ps(), [&](__m512 a) { return _mm512_dpbf16_ps(a, xp, yp); });
    // An FMA is 2 FLOPs per lane, a pair product 4, on 16 lanes each.
    ratio = (4.0 / pairs) / (2.0 / fma);
  }
  std::nth_element(ratios.begin(), ratios.begin() + rounds / 2, ratios.end());
  return ratios[rounds / 2];
}

}  // namespace attn::ops::cpu
