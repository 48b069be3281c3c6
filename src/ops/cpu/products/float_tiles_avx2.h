#pragma once
// The float tiles of products/float_tiles.h for CPUs with AVX2 but not AVX-512 (AMD Zen 2 and 3, Intel before
// Skylake-SP): the same operands read where they lie, the same epilogue with the row maxima, on 16 registers of
// 8 floats: tiles of 6 rows by 16 columns (12 accumulators, 2 vectors of B, one broadcast element of A).
// The row maxima keep 16 lanes a row, as the forward loop reads them (kRowMaxLanes): column j goes to lane
// j mod 16. Included by products/float_tile_products.h in the AVX2 variant only (CPU_CAPABILITY_AVX2).

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <limits>

// The accumulators stay in registers only if the loops over them are unrolled completely.
#if defined(__clang__)
#define ATTN_UNROLL_AVX2 _Pragma("unroll")
#else
#define ATTN_UNROLL_AVX2 _Pragma("GCC unroll 8")
#endif

namespace attn::ops::cpu::ATTN_KERNEL_NAMESPACE {
namespace float_tiles {

/// Floats per register, registers per panel, rows per full tile.
inline constexpr int64_t kVectorLanes = 8;
inline constexpr int kVectors = 2;
inline constexpr int kRows = 6;
inline constexpr int64_t kPanel = kVectors * kVectorLanes;
/// Lanes of a row's maxima (lane_max): one panel's columns.
inline constexpr int64_t kLanes = kPanel;

/// A left operand A[m, k]: element (i, e) at data[i · si + e · se]. Row-major A has se = 1; Aᵀ of a
/// row-major matrix (the backward pass's Pᵀ and dSᵀ) has si = 1.
struct Left {
  const float* data;
  int64_t si, se;
  Left from_row(int64_t i) const { return {data + i * si, si, se}; }
};

/// The mask of vector v's real columns in a panel of `cols` columns (all ones for a whole vector).
inline __m256i column_mask(int64_t cols, int v) {
  const int64_t n = std::clamp<int64_t>(cols - v * kVectorLanes, 0, kVectorLanes);
  const __m256i index = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n)), index);
}

/// C[R, NV·8] (its first `cols` columns) = alpha · A · B + beta · C over k, B row-major (ldb). A whole panel
/// (kWhole: 16 columns) loads B plainly; a partial one through masks, so B needs no padding.
template <int R, int NV, bool kWhole>
struct FloatTile {
  static void run(int64_t k, const Left& a, const float* b, int64_t ldb, float alpha, float beta, float* c,
                  int64_t ldc, int64_t cols, float* lane_max, bool first_panel) {
    __m256 acc[R][NV];
    ATTN_UNROLL_AVX2
    for (int r = 0; r < R; ++r) {
      ATTN_UNROLL_AVX2
      for (int v = 0; v < NV; ++v) acc[r][v] = _mm256_setzero_ps();
    }
    __m256i mask[NV];
    ATTN_UNROLL_AVX2
    for (int v = 0; v < NV; ++v) mask[v] = column_mask(cols, v);
    for (int64_t e = 0; e < k; ++e) {
      __m256 bv[NV];
      ATTN_UNROLL_AVX2
      for (int v = 0; v < NV; ++v) {
        const float* from = b + e * ldb + v * kVectorLanes;
        bv[v] = kWhole ? _mm256_loadu_ps(from) : _mm256_maskload_ps(from, mask[v]);
      }
      ATTN_UNROLL_AVX2
      for (int r = 0; r < R; ++r) {
        const __m256 av = _mm256_broadcast_ss(a.data + r * a.si + e * a.se);
        ATTN_UNROLL_AVX2
        for (int v = 0; v < NV; ++v) acc[r][v] = _mm256_fmadd_ps(av, bv[v], acc[r][v]);
      }
    }
    store(acc, mask, alpha, beta, c, ldc, lane_max, first_panel);
  }

  /// C = alpha · acc + beta · C on the real columns (beta 0: C only written); with lane_max ([R, 16]), the
  /// maximum of the written C over the columns j ≡ l (mod 16) into lane l: replacing it in the first panel
  /// (-inf where the panel has no such column), and the maximum of both after.
  static void store(__m256 (&acc)[R][NV], const __m256i (&mask)[NV], float alpha, float beta, float* c, int64_t ldc,
                    float* lane_max, bool first_panel) {
    const __m256 valpha = _mm256_set1_ps(alpha);
    const __m256 none = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
    ATTN_UNROLL_AVX2
    for (int r = 0; r < R; ++r) {
      float* crow = c + r * ldc;
      __m256 row_max[kVectors] = {none, none};
      ATTN_UNROLL_AVX2
      for (int v = 0; v < NV; ++v) {
        float* to = crow + v * kVectorLanes;
        __m256 x = _mm256_mul_ps(acc[r][v], valpha);
        if (beta != 0.0f) x = _mm256_add_ps(x, kWhole ? _mm256_loadu_ps(to) : _mm256_maskload_ps(to, mask[v]));
        if (kWhole) {
          _mm256_storeu_ps(to, x);
        } else {
          _mm256_maskstore_ps(to, mask[v], x);
        }
        row_max[v] = _mm256_blendv_ps(none, x, _mm256_castsi256_ps(mask[v]));
      }
      if (lane_max) {
        float* lm = lane_max + r * kLanes;
        ATTN_UNROLL_AVX2
        for (int v = 0; v < kVectors; ++v) {
          float* lanes = lm + v * kVectorLanes;
          _mm256_storeu_ps(lanes, first_panel ? row_max[v] : _mm256_max_ps(_mm256_loadu_ps(lanes), row_max[v]));
        }
      }
    }
  }
};

using TileRun = void (*)(int64_t, const Left&, const float*, int64_t, float, float, float*, int64_t, int64_t,
                         float*, bool);

/// FloatTile<R, ·, ·>::run for R = rows (1 to 6) and a panel of `cols` columns.
template <int R>
TileRun choose_columns(int64_t cols) {
  if (cols == kPanel) return &FloatTile<R, 2, true>::run;
  return cols > kVectorLanes ? &FloatTile<R, 2, false>::run : &FloatTile<R, 1, false>::run;
}
inline TileRun choose(int rows, int64_t cols) {
  switch (rows) {
    case 1: return choose_columns<1>(cols);
    case 2: return choose_columns<2>(cols);
    case 3: return choose_columns<3>(cols);
    case 4: return choose_columns<4>(cols);
    case 5: return choose_columns<5>(cols);
    default: return choose_columns<6>(cols);
  }
}

/// C[m, n] = alpha · A[m, k] · B[k, n] + beta · C, B and C row-major; beta is 0 (C only written) or 1. With
/// lane_max ([m, 16]), also lane_max[i, l] = the maximum of C[i, j] over the columns j ≡ l (mod 16). Panels of
/// 16 columns, each in tiles of 6 rows (7 or 8 rows left go as 4 and 3 or 4, as the AVX-512 tiles do).
inline void gemm(int64_t m, int64_t n, int64_t k, float alpha, const Left& a, const float* b, int64_t ldb,
                 float beta, float* c, int64_t ldc, float* lane_max) {
  if (m == 0 || n == 0) return;
  for (int64_t j0 = 0; j0 < n; j0 += kPanel) {
    const int64_t cols = std::min(kPanel, n - j0);
    const TileRun full = choose(kRows, cols);
    for (int64_t i0 = 0; i0 < m;) {
      const int64_t left = m - i0;
      const int rows = static_cast<int>(left == 7 || left == 8 ? 4 : std::min<int64_t>(kRows, left));
      const TileRun tile = rows == kRows ? full : choose(rows, cols);
      tile(k, a.from_row(i0), b + j0, ldb, alpha, beta, c + i0 * ldc + j0, ldc, cols,
           lane_max ? lane_max + i0 * kLanes : nullptr, j0 == 0);
      i0 += rows;
    }
  }
}

/// r[i] = column i of the 8 × 8 matrix whose row i is r[i].
inline void transpose_8x8(__m256 r[8]) {
  __m256 t[8], u[8];
  for (int i = 0; i < 4; ++i) {
    t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  for (int g = 0; g < 2; ++g) {
    const __m256 *lo = t + 4 * g, *hi = t + 4 * g + 2;
    u[4 * g] = _mm256_shuffle_ps(lo[0], hi[0], _MM_SHUFFLE(1, 0, 1, 0));
    u[4 * g + 1] = _mm256_shuffle_ps(lo[0], hi[0], _MM_SHUFFLE(3, 2, 3, 2));
    u[4 * g + 2] = _mm256_shuffle_ps(lo[1], hi[1], _MM_SHUFFLE(1, 0, 1, 0));
    u[4 * g + 3] = _mm256_shuffle_ps(lo[1], hi[1], _MM_SHUFFLE(3, 2, 3, 2));
  }
  for (int i = 0; i < 4; ++i) {
    r[i] = _mm256_permute2f128_ps(u[i], u[4 + i], 0x20);
    r[4 + i] = _mm256_permute2f128_ps(u[i], u[4 + i], 0x31);
  }
}

/// dst[e · ld + j] = src[j · ld_src + e] for j < n, e < d: keys [n, d] as the right operand Kᵀ [d, n] (or
/// values as Vᵀ). Blocks of 8 × 8 go through registers; the edges are copied one at a time.
inline void pack_transposed(const float* src, int64_t ld_src, int64_t n, int64_t d, float* dst, int64_t ld) {
  int64_t j0 = 0;
  for (; j0 + 8 <= n; j0 += 8) {
    int64_t e0 = 0;
    for (; e0 + 8 <= d; e0 += 8) {
      __m256 r[8];
      for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(src + (j0 + i) * ld_src + e0);
      transpose_8x8(r);
      for (int i = 0; i < 8; ++i) _mm256_storeu_ps(dst + (e0 + i) * ld + j0, r[i]);
    }
    for (int64_t e = e0; e < d; ++e) {
      for (int64_t j = j0; j < j0 + 8; ++j) dst[e * ld + j] = src[j * ld_src + e];
    }
  }
  for (int64_t e = 0; e < d; ++e) {
    for (int64_t j = j0; j < n; ++j) dst[e * ld + j] = src[j * ld_src + e];
  }
}

}  // namespace float_tiles
}  // namespace attn::ops::cpu::ATTN_KERNEL_NAMESPACE

#undef ATTN_UNROLL_AVX2
