#pragma once
// What the AVX-512 register tiles of up to 6 rows by 64 columns share, whatever they multiply (bfloat16 pairs
// in bf16_pairs_avx512bf16.cpp, floats in float_tiles.h): the lane masks of a partial panel, the epilogue that
// scales, accumulates and stores a tile and takes its row maxima, and the choice of a tile's instance by its
// rows and vectors. Include only where AVX-512 is enabled. Internal linkage, so each including file keeps the
// copy compiled with its own flags.

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <limits>

// The accumulators stay in registers only if the loops over them are unrolled completely.
#if defined(__clang__)
#define ATTN_UNROLL _Pragma("unroll")
#else
#define ATTN_UNROLL _Pragma("GCC unroll 8")
#endif

namespace attn::ops::cpu {
namespace {
namespace register_tile {

/// Rows and vectors of columns per full tile: 6 × 4 accumulators, 4 loaded vectors of B and one broadcast
/// element of A fill 29 of the 32 registers.
inline constexpr int kRows = 6;
inline constexpr int kVectors = 4;
inline constexpr int64_t kLanes = 16;
inline constexpr int64_t kPanel = kVectors * kLanes;

/// Lanes of vector v that hold real columns of a panel with `cols` columns.
inline __mmask16 lanes(int64_t cols, int v) {
  const int64_t n = std::clamp<int64_t>(cols - v * kLanes, 0, kLanes);
  return static_cast<__mmask16>((1u << n) - 1u);
}

/// C[R, cols] = alpha · acc + beta · C (beta 0: C is only written; 1: accumulated), masked to the panel's
/// real columns. With lane_max ([R, 16]), also the maximum of the written C[r, j] over the columns j ≡ l
/// mod 16 into lane_max[r, l]: replacing it in the first panel, and the maximum of both after. While the
/// results are in registers, the softmax's row maximum costs a vmaxps each instead of a pass over the tile
/// later. A NaN may or may not reach lane_max (vmaxps keeps one operand).
template <int R, int NV>
inline void store(__m512 (&acc)[R][NV], int64_t cols, float alpha, float beta, float* c, int64_t ldc,
                  float* lane_max, bool first_panel) {
  const __m512 valpha = _mm512_set1_ps(alpha);
  ATTN_UNROLL
  for (int r = 0; r < R; ++r) {
    float* crow = c + r * ldc;
    __m512 row_max = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
    ATTN_UNROLL
    for (int v = 0; v < NV; ++v) {
      const __mmask16 m = lanes(cols, v);
      __m512 x = _mm512_mul_ps(acc[r][v], valpha);
      if (beta != 0.0f) x = _mm512_add_ps(x, _mm512_maskz_loadu_ps(m, crow + v * kLanes));
      _mm512_mask_storeu_ps(crow + v * kLanes, m, x);
      row_max = _mm512_mask_max_ps(row_max, m, row_max, x);
    }
    if (lane_max) {
      float* lm = lane_max + r * kLanes;
      _mm512_storeu_ps(lm, first_panel ? row_max : _mm512_max_ps(_mm512_loadu_ps(lm), row_max));
    }
  }
}

template <template <int, int> class Tile, int R>
auto choose_vectors(int nv) {
  switch (nv) {
    case 1: return &Tile<R, 1>::run;
    case 2: return &Tile<R, 2>::run;
    case 3: return &Tile<R, 3>::run;
    default: return &Tile<R, 4>::run;
  }
}

/// Tile<R, NV>::run for R = rows (1 to 6; 6 past it) and NV = nv (1 to 4; 4 past it).
template <template <int, int> class Tile>
auto choose(int rows, int nv) {
  switch (rows) {
    case 1: return choose_vectors<Tile, 1>(nv);
    case 2: return choose_vectors<Tile, 2>(nv);
    case 3: return choose_vectors<Tile, 3>(nv);
    case 4: return choose_vectors<Tile, 4>(nv);
    case 5: return choose_vectors<Tile, 5>(nv);
    default: return choose_vectors<Tile, 6>(nv);
  }
}

/// Where a right operand B[k, n] lies, in panels of kPanel columns: row e of panel p at data + p · panel_step +
/// e · ld, and B's column 0 at column `first` of panel 0. A row-major B, its rows ld apart, is {data, ld}: its
/// panels follow one another (panel_step = kPanel) and column j lies at data + j.
template <typename T>
struct Panels {
  const T* data;
  int64_t ld;
  int64_t first = 0;
  int64_t panel_step = kPanel;
};

/// C[m, n] = alpha · A · B + beta · C (C row-major, ldc) through Tile, a panel of B at a time (a partial one
/// first when B starts inside a panel), each in tiles of 6 rows (fewer at the bottom: 7 or 8 rows left go as 4
/// and 3 or 4, since a tile of 1 or 2 rows loads as many vectors of B for a third of the products). A is a
/// left operand with from_row(i) (its rows from row i on); k counts B's rows. With lane_max ([m, 16]),
/// lane_max[i, ·] = 16 partial maxima of row i of C, each column of the row in one of them.
template <template <int, int> class Tile, typename Left, typename Right>
void multiply(int64_t m, int64_t n, int64_t k, float alpha, const Left& a, const Panels<Right>& b, float beta,
              float* c, int64_t ldc, float* lane_max) {
  if (m == 0 || n == 0) return;
  for (int64_t j0 = 0; j0 < n;) {
    const int64_t at = b.first + j0;  // where column j0 lies, counted from panel 0's first column
    const int64_t cols = std::min(kPanel - at % kPanel, n - j0);
    const Right* panel = b.data + (at / kPanel) * b.panel_step + at % kPanel;
    const int nv = static_cast<int>((cols + kLanes - 1) / kLanes);
    const auto full = choose<Tile>(kRows, nv);
    for (int64_t i0 = 0; i0 < m;) {
      const int64_t left = m - i0;
      const int rows = static_cast<int>(left == 7 || left == 8 ? 4 : std::min<int64_t>(kRows, left));
      const auto tile = rows == kRows ? full : choose<Tile>(rows, nv);
      tile(k, a.from_row(i0), panel, b.ld, alpha, beta, c + i0 * ldc + j0, ldc, cols,
           lane_max ? lane_max + i0 * kLanes : nullptr, j0 == 0);
      i0 += rows;
    }
    j0 += cols;
  }
}

}  // namespace register_tile
}  // namespace
}  // namespace attn::ops::cpu
