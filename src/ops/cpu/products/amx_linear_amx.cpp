// linear_rows on AMX's tiles (ops/cpu/products/amx_linear.h). CMake compiles this file alone with AMX, AVX-512
// and AVX512-BF16 enabled; the callers reach it only where hardware_has_amx().

#include "ops/cpu/products/amx_linear.h"

#include "ops/cpu/products/amx_panels.h"
#include "ops/cpu/products/amx_tile_config.h"
#include "ops/cpu/products/transpose_16x16.h"

// The buffers' vector code, compiled here for AMX and AVX-512, in a namespace of its own so that it never
// stands in for another variant's.
#define ATTN_KERNEL_NAMESPACE kernel_amx
#include "ops/cpu/products/cache_line_vector.h"

#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <vector>

namespace attn::ops::cpu {
namespace {

constexpr int64_t kTileBytes = 64;
constexpr int64_t kBlock = 2 * kAmxTilePairs;  // elements of k per tile row

/// Blocks of k ahead of the tile loads that each weight row is prefetched: 16 rows a tile, each its own stream,
/// 512 bytes ahead of its loads.
constexpr int64_t kPrefetchBlocks = 16;

/// `kTiles` C tiles (1 to 4; 16 weight rows each, against the 16 rows of x in B) from zero over the whole of
/// k, stored to c[0, kTiles): A tiles (4, 5) are 16 weight rows read where they lie, B (6) the panel of x for the
/// block; the weights' rows are `a_stride` bytes apart. A tile load's 16 rows are 16 streams, which the hardware
/// does not prefetch for it: each row is prefetched kPrefetchBlocks blocks ahead (`blocks_in_row` blocks lie in
/// a row; none past it).
template <int kTiles>
void group_products(const uint32_t* x_panel, int64_t blocks, const c10::BFloat16* w, int64_t a_stride,
                    int64_t blocks_in_row, float (*c)[256]) {
  const int64_t row_elements = a_stride / 2;
  const char* rows = reinterpret_cast<const char*>(w);
  _tile_zero(0);
  if constexpr (kTiles > 1) _tile_zero(1);
  if constexpr (kTiles > 2) _tile_zero(2);
  if constexpr (kTiles > 3) _tile_zero(3);
  for (int64_t kb = 0; kb < blocks; ++kb) {
    if (kb + kPrefetchBlocks < blocks_in_row) {
      const char* ahead = rows + (kb + kPrefetchBlocks) * kBlock * 2;
      for (int64_t r = 0; r < 16 * kTiles; ++r) _mm_prefetch(ahead + r * a_stride, _MM_HINT_T0);
    }
    _tile_loadd(6, x_panel + kb * 256, kTileBytes);
    _tile_loadd(4, w + kb * kBlock, a_stride);
    _tile_dpbf16ps(0, 4, 6);
    if constexpr (kTiles > 1) {
      _tile_loadd(5, w + 16 * row_elements + kb * kBlock, a_stride);
      _tile_dpbf16ps(1, 5, 6);
    }
    if constexpr (kTiles > 2) {
      _tile_loadd(4, w + 32 * row_elements + kb * kBlock, a_stride);
      _tile_dpbf16ps(2, 4, 6);
    }
    if constexpr (kTiles > 3) {
      _tile_loadd(5, w + 48 * row_elements + kb * kBlock, a_stride);
      _tile_dpbf16ps(3, 5, 6);
    }
  }
  _tile_stored(0, c[0], kTileBytes);
  if constexpr (kTiles > 1) _tile_stored(1, c[1], kTileBytes);
  if constexpr (kTiles > 2) _tile_stored(2, c[2], kTileBytes);
  if constexpr (kTiles > 3) _tile_stored(3, c[3], kTileBytes);
}

/// C tile t (yᵀ: 16 weight rows by the 16 rows of x) stored, transposed, its bias added, rounded into y.
void store_transposed(const float* c, int64_t rows, int64_t outs, const float* bias, c10::BFloat16* y,
                      int64_t ldy) {
  __m512i r[16];
  for (int i = 0; i < 16; ++i) r[i] = _mm512_loadu_si512(c + i * 16);
  transpose_16x16(r);  // r[x row] = its 16 outputs
  const __mmask16 lanes = static_cast<__mmask16>((1u << outs) - 1u);
  const __m512 b = bias ? _mm512_maskz_loadu_ps(lanes, bias) : _mm512_setzero_ps();
  for (int64_t i = 0; i < rows; ++i) {
    const __m512 v = _mm512_add_ps(_mm512_castsi512_ps(r[i]), b);
    _mm256_mask_storeu_epi16(y + i * ldy, lanes, (__m256i)_mm512_cvtneps_pbh(v));
  }
}

}  // namespace

void amx_linear_rows(const uint32_t* x_panel, int64_t rows, int64_t in, const c10::BFloat16* w, int64_t ldw,
                     int64_t out, const float* bias, c10::BFloat16* y, int64_t ldy) {
  if (rows <= 0 || out <= 0) return;
  const int64_t blocks = amx_pair_blocks(in), whole = in / kBlock;
  // The weight as A: whole blocks read where they lie; the last block of a k short of 32, and the weight rows
  // of a group short of 16, through a zero-padded copy (a tile load would read past the rows).
  thread_local kernel_amx::CacheLineVector<c10::BFloat16> edge;
  alignas(64) float c[4][256];
  _tile_loadconfig(&eight_full_tiles());
  for (int64_t o0 = 0; o0 < out; o0 += kAmxLinearGroup) {
    const int64_t outs = std::min(kAmxLinearGroup, out - o0);
    const int64_t tiles = (outs + 15) / 16;
    const bool whole_rows = outs % 16 == 0;
    const c10::BFloat16* a = w + o0 * ldw;
    int64_t a_stride = ldw * 2, a_blocks = whole;
    if (!whole_rows || whole < blocks) {
      // The group's rows copied whole, zero-padded to 16 rows and whole blocks.
      const int64_t ld = blocks * kBlock;
      edge.assign(tiles * 16 * ld, c10::BFloat16(0.0f));
      for (int64_t i = 0; i < outs; ++i) std::memcpy(edge.data() + i * ld, a + i * ldw, in * sizeof(c10::BFloat16));
      a = edge.data();
      a_stride = ld * 2;
      a_blocks = blocks;
    }
    switch (tiles) {
      case 1: group_products<1>(x_panel, a_blocks, a, a_stride, a_blocks, c); break;
      case 2: group_products<2>(x_panel, a_blocks, a, a_stride, a_blocks, c); break;
      case 3: group_products<3>(x_panel, a_blocks, a, a_stride, a_blocks, c); break;
      default: group_products<4>(x_panel, a_blocks, a, a_stride, a_blocks, c); break;
    }
    for (int64_t t = 0; t < tiles; ++t) {
      const int64_t o = o0 + t * 16;
      store_transposed(c[t], rows, std::min<int64_t>(16, out - o), bias ? bias + o : nullptr, y + o, ldy);
    }
  }
  _tile_release();
}

}  // namespace attn::ops::cpu
