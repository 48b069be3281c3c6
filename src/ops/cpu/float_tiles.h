#pragma once
// The fused kernel's own float matrix products on AVX-512, in place of BLAS: register tiles of 6 rows by 64
// columns whose operands are read where they lie (V, K, Q and dO as stored, P and dS transposed in place; Kᵀ
// and Vᵀ packed once per kv head), so nothing is packed per tile, and whose epilogue also gives the forward
// softmax its row maxima. Included by
// flash_attention_kernel_impl.h in the AVX-512 variant only (CPU_CAPABILITY_AVX512).

#include "ops/cpu/transpose_16x16.h"

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <limits>

namespace attn::ops::cpu::ATTN_KERNEL_NAMESPACE {
namespace float_tiles {

inline constexpr int kRows = 6;
inline constexpr int kVectors = 4;
inline constexpr int64_t kLanes = 16;
inline constexpr int64_t kPanel = kVectors * kLanes;

#if defined(__clang__)
#define ATTN_FLOAT_TILES_UNROLL _Pragma("unroll")
#else
#define ATTN_FLOAT_TILES_UNROLL _Pragma("GCC unroll 8")
#endif

/// A left operand A[m, k]: element (i, e) at data[i · si + e · se]. Row-major A has se = 1; Aᵀ of a
/// row-major matrix (the backward pass's Pᵀ and dSᵀ) has si = 1.
struct Left {
  const float* data;
  int64_t si, se;
};

/// Lanes of vector v that hold real columns of a panel with `cols` columns.
inline __mmask16 lanes(int64_t cols, int v) {
  const int64_t n = std::clamp<int64_t>(cols - v * kLanes, 0, kLanes);
  return static_cast<__mmask16>((1u << n) - 1u);
}

/// C[R, NV·16] (its first `cols` columns) = alpha · A · B + beta · C over k, B row-major [k, ·] (ldb). Loads
/// of B are masked to the panel's columns, so B needs no padding.
template <int R, int NV>
void tile(int64_t k, const Left& a, const float* b, int64_t ldb, float alpha, float beta, float* c, int64_t ldc,
          int64_t cols, float* lane_max) {
  __m512 acc[R][NV];
  ATTN_FLOAT_TILES_UNROLL
  for (int r = 0; r < R; ++r) {
    ATTN_FLOAT_TILES_UNROLL
    for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_setzero_ps();
  }
  __mmask16 mask[NV];
  ATTN_FLOAT_TILES_UNROLL
  for (int v = 0; v < NV; ++v) mask[v] = lanes(cols, v);
  for (int64_t e = 0; e < k; ++e) {
    __m512 bv[NV];
    ATTN_FLOAT_TILES_UNROLL
    for (int v = 0; v < NV; ++v) bv[v] = _mm512_maskz_loadu_ps(mask[v], b + e * ldb + v * kLanes);
    ATTN_FLOAT_TILES_UNROLL
    for (int r = 0; r < R; ++r) {
      const __m512 av = _mm512_set1_ps(a.data[r * a.si + e * a.se]);
      ATTN_FLOAT_TILES_UNROLL
      for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_fmadd_ps(av, bv[v], acc[r][v]);
    }
  }
  const __m512 valpha = _mm512_set1_ps(alpha);
  ATTN_FLOAT_TILES_UNROLL
  for (int r = 0; r < R; ++r) {
    float* crow = c + r * ldc;
    __m512 row_max = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
    ATTN_FLOAT_TILES_UNROLL
    for (int v = 0; v < NV; ++v) {
      __m512 x = _mm512_mul_ps(acc[r][v], valpha);
      if (beta != 0.0f) x = _mm512_add_ps(x, _mm512_maskz_loadu_ps(mask[v], crow + v * kLanes));
      _mm512_mask_storeu_ps(crow + v * kLanes, mask[v], x);
      row_max = _mm512_mask_max_ps(row_max, mask[v], row_max, x);
    }
    if (lane_max) {
      float* lm = lane_max + r * kLanes;
      _mm512_storeu_ps(lm, _mm512_max_ps(_mm512_loadu_ps(lm), row_max));
    }
  }
}

using TileFn = void (*)(int64_t, const Left&, const float*, int64_t, float, float, float*, int64_t, int64_t, float*);

template <int R>
TileFn tile_for_vectors(int nv) {
  switch (nv) {
    case 1: return tile<R, 1>;
    case 2: return tile<R, 2>;
    case 3: return tile<R, 3>;
    default: return tile<R, 4>;
  }
}

inline TileFn tile_for(int rows, int nv) {
  switch (rows) {
    case 1: return tile_for_vectors<1>(nv);
    case 2: return tile_for_vectors<2>(nv);
    case 3: return tile_for_vectors<3>(nv);
    case 4: return tile_for_vectors<4>(nv);
    case 5: return tile_for_vectors<5>(nv);
    default: return tile_for_vectors<6>(nv);
  }
}

/// C[m, n] = alpha · A[m, k] · B[k, n] + beta · C, B and C row-major; beta is 0 (C only written) or 1. With
/// lane_max ([m, 16]), also lane_max[i, l] = max(itself, C[i, j]) over the written columns j ≡ l (mod 16).
inline void gemm(int64_t m, int64_t n, int64_t k, float alpha, const Left& a, const float* b, int64_t ldb,
                 float beta, float* c, int64_t ldc, float* lane_max) {
  if (m == 0 || n == 0) return;
  for (int64_t j0 = 0; j0 < n; j0 += kPanel) {
    const int64_t cols = std::min(kPanel, n - j0);
    const int nv = static_cast<int>((cols + kLanes - 1) / kLanes);
    const TileFn full = tile_for(kRows, nv);
    int64_t i0 = 0;
    for (; i0 + kRows <= m; i0 += kRows) {
      full(k, Left{a.data + i0 * a.si, a.si, a.se}, b + j0, ldb, alpha, beta, c + i0 * ldc + j0, ldc, cols,
           lane_max ? lane_max + i0 * kLanes : nullptr);
    }
    if (i0 < m) {
      tile_for(static_cast<int>(m - i0), nv)(k, Left{a.data + i0 * a.si, a.si, a.se}, b + j0, ldb, alpha, beta,
                                             c + i0 * ldc + j0, ldc, cols, lane_max ? lane_max + i0 * kLanes : nullptr);
    }
  }
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

#undef ATTN_FLOAT_TILES_UNROLL

}  // namespace float_tiles
}  // namespace attn::ops::cpu::ATTN_KERNEL_NAMESPACE
