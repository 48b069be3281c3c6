#pragma once
// The fused kernel's own float matrix products on AVX-512, in place of BLAS: register tiles of 6 rows by 64
// columns whose operands are read where they lie (V, K, Q and dO as stored, P and dS transposed in place; Kᵀ
// and Vᵀ packed once per kv head), so nothing is packed per tile, and whose epilogue also gives the forward
// softmax its row maxima. Included by products/float_tile_products.h in the AVX-512 variant only
// (CPU_CAPABILITY_AVX512).

#include "ops/cpu/products/register_tile_avx512.h"
#include "ops/cpu/products/transpose_16x16.h"

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <limits>

namespace attn::ops::cpu::ATTN_KERNEL_NAMESPACE {
namespace float_tiles {

using register_tile::kLanes;

/// A left operand A[m, k]: element (i, e) at data[i · si + e · se]. Row-major A has se = 1; Aᵀ of a
/// row-major matrix (the backward pass's Pᵀ and dSᵀ) has si = 1.
struct Left {
  const float* data;
  int64_t si, se;
  Left from_row(int64_t i) const { return {data + i * si, si, se}; }
};

/// C[R, NV·16] (its first `cols` columns) = alpha · A · B + beta · C over k, B row-major [k, ·] (ldb). Loads
/// of B are masked to the panel's columns, so B needs no padding.
template <int R, int NV>
struct FloatTile {
  static void run(int64_t k, const Left& a, const float* b, int64_t ldb, float alpha, float beta, float* c,
                  int64_t ldc, int64_t cols, float* lane_max, bool first_panel) {
    __m512 acc[R][NV];
    ATTN_UNROLL
    for (int r = 0; r < R; ++r) {
      ATTN_UNROLL
      for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_setzero_ps();
    }
    // Zero-masked loads cost an Intel Xeon more than plain ones, enough to slow the whole product by 7-11 %
    // (bench/RESULTS.md, "Plain loads for full panels"), so only a partial panel loads masked.
    if (cols == NV * kLanes) {
      accumulate<false>(acc, k, a, b, ldb, cols);
    } else {
      accumulate<true>(acc, k, a, b, ldb, cols);
    }
    register_tile::store<R, NV>(acc, cols, alpha, beta, c, ldc, lane_max, first_panel);
  }

 private:
  template <bool kMasked>
  static inline __attribute__((always_inline)) void accumulate(__m512 (&acc)[R][NV], int64_t k, const Left& a,
                                                               const float* b, int64_t ldb, int64_t cols) {
    __mmask16 mask[NV];
    ATTN_UNROLL
    for (int v = 0; v < NV; ++v) mask[v] = register_tile::lanes(cols, v);
    const float* const ad = a.data;
    const int64_t si = a.si, se = a.se;
    for (int64_t e = 0; e < k; ++e) {
      __m512 bv[NV];
      ATTN_UNROLL
      for (int v = 0; v < NV; ++v) {
        const float* bp = b + e * ldb + v * kLanes;
        bv[v] = kMasked ? _mm512_maskz_loadu_ps(mask[v], bp) : _mm512_loadu_ps(bp);
      }
      ATTN_UNROLL
      for (int r = 0; r < R; ++r) {
        const __m512 av = _mm512_set1_ps(ad[r * si + e * se]);
        ATTN_UNROLL
        for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_fmadd_ps(av, bv[v], acc[r][v]);
      }
    }
  }
};

/// C[m, n] = alpha · A[m, k] · B[k, n] + beta · C, C row-major and B in panels (row-major B is {b, ldb}); beta
/// is 0 (C only written) or 1. With lane_max ([m, 16]), also 16 partial maxima of each row of C, whose maximum
/// is the row's.
inline void gemm(int64_t m, int64_t n, int64_t k, float alpha, const Left& a, const register_tile::Panels<float>& b,
                 float beta, float* c, int64_t ldc, float* lane_max) {
  register_tile::multiply<FloatTile>(m, n, k, alpha, a, b, beta, c, ldc, lane_max);
}

/// dst[e · ld + j] = src[j · ld_src + e] for j < n, e < d: keys [n, d] as the right operand Kᵀ [d, n] (or
/// values as Vᵀ). Blocks of 16 × 16 go through registers; the edges are copied one at a time.
inline void pack_transposed(const float* src, int64_t ld_src, int64_t n, int64_t d, float* dst, int64_t ld) {
  int64_t j0 = 0;
  for (; j0 + 16 <= n; j0 += 16) {
    int64_t e0 = 0;
    for (; e0 + 16 <= d; e0 += 16) {
      __m512i r[16];
      for (int i = 0; i < 16; ++i) r[i] = _mm512_castps_si512(_mm512_loadu_ps(src + (j0 + i) * ld_src + e0));
      transpose_16x16(r);
      for (int i = 0; i < 16; ++i) _mm512_storeu_ps(dst + (e0 + i) * ld + j0, _mm512_castsi512_ps(r[i]));
    }
    for (int64_t e = e0; e < d; ++e) {
      for (int64_t j = j0; j < j0 + 16; ++j) dst[e * ld + j] = src[j * ld_src + e];
    }
  }
  for (int64_t e = 0; e < d; ++e) {
    for (int64_t j = j0; j < n; ++j) dst[e * ld + j] = src[j * ld_src + e];
  }
}

}  // namespace float_tiles
}  // namespace attn::ops::cpu::ATTN_KERNEL_NAMESPACE
