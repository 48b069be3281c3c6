// The AMX route's packing and products (ops/cpu/products/amx_panels.h). CMake compiles this file alone with AMX,
// AVX-512 and AVX512-BF16 enabled; the callers reach it only where hardware_has_amx().
//
// Tile registers are not renamed: a load into a tile waits for every product still reading it, and on the
// Intel Xeon of bench/RESULTS.md a tile load or store cost as much as a product. So the panels' product keeps A
// resident for a whole row of panels where k allows (Q·Kᵀ at d_k <= 64: four A tiles, loading only B's), and
// the row pairs' product keeps C in its tiles for the whole of k.

#include "ops/cpu/products/amx_panels.h"

#include "ops/cpu/products/amx_tile_config.h"
#include "ops/cpu/products/bf16_pairs.h"
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

constexpr int64_t kTileBytes = 64;                                 // bytes per tile row
constexpr int64_t kChunkWords = kAmxTilePairs * kTileWordsPerRow;  // one B tile: 16 pairs × 16 columns

/// Loads the tile configuration for one product and releases the tiles after it, so that the thread's other
/// AMX users (oneDNN's kernels inside LibTorch) find them as they left them.
class TileScope {
 public:
  TileScope() { _tile_loadconfig(&eight_full_tiles()); }
  ~TileScope() { _tile_release(); }
  TileScope(const TileScope&) = delete;
  TileScope& operator=(const TileScope&) = delete;
};

/// Asks for one packed B tile (1 KB, 16 lines) into L1.
inline void prefetch_tile(const uint32_t* tile) {
  const char* bytes = reinterpret_cast<const char*>(tile);
  for (int64_t line = 0; line < kChunkWords * 4; line += 64) _mm_prefetch(bytes + line, _MM_HINT_T0);
}

/// How far ahead the row pairs' product asks for B's tiles, in chunks of k.
constexpr int64_t kPrefetchChunks = 2;
/// How far ahead the A-resident panels' product asks for B's panels (K in the forward's Q·Kᵀ), in panels.
constexpr int64_t kPrefetchPanels = 2;

/// C for 32 rows (or 16) and up to two pair blocks (k <= 64): A's four tiles stay resident (4, 5: rows 0-15;
/// 6, 7: rows 16-31; one per pair block), so each panel loads only its B tiles (2, 3) into two C tiles (0, 1).
/// B's panels stream from L2 (a head's packed keys), so each is asked for kPrefetchPanels panels ahead.
template <bool kTwoRows, bool kTwoBlocks>
void panels_a_resident(const c10::BFloat16* a, int64_t lda, const uint32_t* x, int64_t panels, float* c,
                       int64_t ldc) {
  constexpr int64_t panel_words = (kTwoBlocks ? 2 : 1) * kChunkWords;
  const int64_t a_stride = lda * static_cast<int64_t>(sizeof(c10::BFloat16));
  const int64_t c_stride = ldc * static_cast<int64_t>(sizeof(float));
  float* c1 = c + kTileRows * ldc;
  _tile_loadd(4, a, a_stride);
  if constexpr (kTwoBlocks) _tile_loadd(5, a + 2 * kAmxTilePairs, a_stride);
  if constexpr (kTwoRows) {
    const c10::BFloat16* a1 = a + kTileRows * lda;
    _tile_loadd(6, a1, a_stride);
    if constexpr (kTwoBlocks) _tile_loadd(7, a1 + 2 * kAmxTilePairs, a_stride);
  }
  for (int64_t g = 0; g < panels; ++g) {
    const uint32_t* b = x + g * panel_words;
    if (g + kPrefetchPanels < panels) {
      prefetch_tile(b + kPrefetchPanels * panel_words);
      if constexpr (kTwoBlocks) prefetch_tile(b + kPrefetchPanels * panel_words + kChunkWords);
    }
    _tile_zero(0);
    if constexpr (kTwoRows) _tile_zero(1);
    _tile_loadd(2, b, kTileBytes);
    _tile_dpbf16ps(0, 4, 2);
    if constexpr (kTwoRows) _tile_dpbf16ps(1, 6, 2);
    if constexpr (kTwoBlocks) {
      _tile_loadd(3, b + kChunkWords, kTileBytes);
      _tile_dpbf16ps(0, 5, 3);
      if constexpr (kTwoRows) _tile_dpbf16ps(1, 7, 3);
    }
    _tile_stored(0, c + g * kAmxPanel, c_stride);
    if constexpr (kTwoRows) _tile_stored(1, c1 + g * kAmxPanel, c_stride);
  }
}

/// C tiles 0-3 = A·B over `blocks` pair blocks for two A tiles of 16 rows (a0; a1 where two_rows) by two B
/// panels (b0; b1 where two_panels): C 0 = a0·b0, 1 = a0·b1, 2 = a1·b0, 3 = a1·b1. A (4, 5) is loaded from its
/// rows (a_stride bytes apart) and B (6, 7) from its whole tiles for each block.
inline void multiply_two_by_two(const c10::BFloat16* a0, const c10::BFloat16* a1, int64_t a_stride, bool two_rows,
                                const uint32_t* b0, const uint32_t* b1, bool two_panels, int64_t blocks) {
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  for (int64_t kb = 0; kb < blocks; ++kb) {
    _tile_loadd(4, a0 + kb * 2 * kAmxTilePairs, a_stride);
    _tile_loadd(6, b0 + kb * kChunkWords, kTileBytes);
    if (two_panels) _tile_loadd(7, b1 + kb * kChunkWords, kTileBytes);
    _tile_dpbf16ps(0, 4, 6);
    if (two_panels) _tile_dpbf16ps(1, 4, 7);
    if (two_rows) {
      _tile_loadd(5, a1 + kb * 2 * kAmxTilePairs, a_stride);
      _tile_dpbf16ps(2, 5, 6);
      if (two_panels) _tile_dpbf16ps(3, 5, 7);
    }
  }
}

/// C for a wider k: blocks of two row tiles (or one) by two panels (C tiles 0-3), A (4, 5) and B (6, 7) loaded
/// for each pair block.
void panels_blocked(const c10::BFloat16* a, int64_t lda, bool two_rows, int64_t pair_blocks, const uint32_t* x,
                    int64_t panels, float* c, int64_t ldc) {
  const int64_t a_stride = lda * static_cast<int64_t>(sizeof(c10::BFloat16));
  const int64_t panel_words = pair_blocks * kChunkWords;
  const int64_t c_stride = ldc * static_cast<int64_t>(sizeof(float));
  const c10::BFloat16* a1 = a + kTileRows * lda;
  float* c1 = c + kTileRows * ldc;
  for (int64_t g = 0; g < panels; g += 2) {
    const uint32_t* b0 = x + g * panel_words;
    const uint32_t* b1 = b0 + panel_words;
    const bool two_panels = g + 1 < panels;
    multiply_two_by_two(a, a1, a_stride, two_rows, b0, b1, two_panels, pair_blocks);
    _tile_stored(0, c + g * kAmxPanel, c_stride);
    if (two_panels) _tile_stored(1, c + (g + 1) * kAmxPanel, c_stride);
    if (two_rows) {
      _tile_stored(2, c1 + g * kAmxPanel, c_stride);
      if (two_panels) _tile_stored(3, c1 + (g + 1) * kAmxPanel, c_stride);
    }
  }
}

/// C += A·B for two row tiles (or one) by two column groups (or one) at a time: C tiles 0-3 loaded from c, A
/// (4, 5) and B (6, 7) loaded for each chunk of 32 of k, C stored back.
template <bool kTwoRows>
void row_pairs_blocked(const c10::BFloat16* p, int64_t ldp, int64_t chunks, const uint32_t* values,
                       int64_t group_words, int64_t col_groups, float* c, int64_t ldc) {
  const int64_t p_stride = ldp * static_cast<int64_t>(sizeof(c10::BFloat16));
  const int64_t c_stride = ldc * static_cast<int64_t>(sizeof(float));
  const c10::BFloat16* p1 = p + kTileRows * ldp;
  for (int64_t cg = 0; cg < col_groups; cg += 2) {
    const bool two_cols = cg + 1 < col_groups;
    float* c0 = c + cg * kTileWordsPerRow;
    float* c1 = c0 + kTileRows * ldc;
    const uint32_t* v0 = values + cg * group_words;
    const uint32_t* v1 = v0 + group_words;
    _tile_loadd(0, c0, c_stride);
    if (two_cols) _tile_loadd(1, c0 + kTileWordsPerRow, c_stride);
    if constexpr (kTwoRows) {
      _tile_loadd(2, c1, c_stride);
      if (two_cols) _tile_loadd(3, c1 + kTileWordsPerRow, c_stride);
    }
    for (int64_t ch = 0; ch < chunks; ++ch) {
      // B's tiles two chunks ahead into L1: B (V in the forward) streams from L2, and a tile load that misses L1
      // holds up the products queued behind it.
      if (ch + kPrefetchChunks < chunks) {
        prefetch_tile(v0 + (ch + kPrefetchChunks) * kChunkWords);
        if (two_cols) prefetch_tile(v1 + (ch + kPrefetchChunks) * kChunkWords);
      }
      _tile_loadd(4, p + ch * kAmxKeyChunk, p_stride);
      if constexpr (kTwoRows) _tile_loadd(5, p1 + ch * kAmxKeyChunk, p_stride);
      _tile_loadd(6, v0 + ch * kChunkWords, kTileBytes);
      if (two_cols) _tile_loadd(7, v1 + ch * kChunkWords, kTileBytes);
      _tile_dpbf16ps(0, 4, 6);
      if (two_cols) _tile_dpbf16ps(1, 4, 7);
      if constexpr (kTwoRows) {
        _tile_dpbf16ps(2, 5, 6);
        if (two_cols) _tile_dpbf16ps(3, 5, 7);
      }
    }
    _tile_stored(0, c0, c_stride);
    if (two_cols) _tile_stored(1, c0 + kTileWordsPerRow, c_stride);
    if constexpr (kTwoRows) {
      _tile_stored(2, c1, c_stride);
      if (two_cols) _tile_stored(3, c1 + kTileWordsPerRow, c_stride);
    }
  }
}

/// A stored C tile (16 rows of a by 16 rows of x) written transposed into c: row i of x's 16 gets the tile's
/// column i, times scale.
void store_c_transposed(const float* block, float scale, float* c, int64_t ldc) {
  __m512i r[16];
  for (int i = 0; i < 16; ++i) r[i] = _mm512_load_si512(block + i * 16);
  transpose_16x16(r);
  const __m512 v = _mm512_set1_ps(scale);
  for (int i = 0; i < 16; ++i) _mm512_storeu_ps(c + i * ldc, _mm512_mul_ps(v, _mm512_castsi512_ps(r[i])));
}

}  // namespace

void amx_multiply_rows_transposed(const c10::BFloat16* a, int64_t lda, int64_t n, int64_t width, const uint32_t* x,
                                  int64_t m, float scale, float* c, int64_t ldc, const c10::BFloat16* prefetch,
                                  int64_t ld_prefetch, int64_t bytes_prefetch) {
  if (m <= 0 || n <= 0 || width <= 0) return;
  const int64_t blocks = amx_pair_blocks(width), panels = (m + kAmxPanel - 1) / kAmxPanel;
  const int64_t panel_words = amx_panel_stride(width);
  // a's tiles where they lie when whole (32 of its rows and whole blocks of k); a partial group through a
  // zero-padded copy, since a tile load reads 16 rows of 64 bytes.
  thread_local kernel_amx::CacheLineVector<c10::BFloat16> edge;
  const bool whole_width = width % (2 * kAmxTilePairs) == 0;
  const int64_t lines_prefetch = prefetch ? (bytes_prefetch + 63) / 64 : 0;
  const TileScope tiles;
  for (int64_t j0 = 0; j0 < n; j0 += 2 * kTileRows) {
    const int64_t rows = std::min<int64_t>(2 * kTileRows, n - j0);
    const bool two_tiles = rows > kTileRows;
    const c10::BFloat16* a0 = a + j0 * lda;
    int64_t a_stride = lda * 2;
    if (!whole_width || rows < 2 * kTileRows) {
      const int64_t ld = blocks * 2 * kAmxTilePairs;
      edge.assign(2 * kTileRows * ld, c10::BFloat16(0.0f));
      for (int64_t i = 0; i < rows; ++i) std::memcpy(edge.data() + i * ld, a0 + i * lda, width * 2);
      a0 = edge.data();
      a_stride = ld * 2;
    }
    const c10::BFloat16* a1 = a0 + kTileRows * (a_stride / 2);
    // The values of these 32 rows, on their way to L2 while the tiles work.
    for (int64_t i = 0; i < rows * lines_prefetch; ++i) {
      _mm_prefetch(reinterpret_cast<const char*>(prefetch + (j0 + i / lines_prefetch) * ld_prefetch) +
                       64 * (i % lines_prefetch),
                   _MM_HINT_T1);
    }
    for (int64_t p = 0; p < panels; p += 2) {
      const bool two_panels = p + 1 < panels;
      const uint32_t* x0 = x + p * panel_words;
      const uint32_t* x1 = x0 + panel_words;
      multiply_two_by_two(a0, a1, a_stride, two_tiles, x0, x1, two_panels, blocks);
      alignas(64) float block[4][16 * 16];
      _tile_stored(0, block[0], kTileBytes);
      if (two_panels) _tile_stored(1, block[1], kTileBytes);
      if (two_tiles) _tile_stored(2, block[2], kTileBytes);
      if (two_tiles && two_panels) _tile_stored(3, block[3], kTileBytes);
      float* c0 = c + p * kAmxPanel * ldc + j0;
      store_c_transposed(block[0], scale, c0, ldc);
      if (two_panels) store_c_transposed(block[1], scale, c0 + kAmxPanel * ldc, ldc);
      if (two_tiles) {
        store_c_transposed(block[2], scale, c0 + kTileRows, ldc);
        if (two_panels) store_c_transposed(block[3], scale, c0 + kAmxPanel * ldc + kTileRows, ldc);
      }
    }
  }
}

void amx_pack_column_panels(const c10::BFloat16* x, int64_t ld, int64_t rows, int64_t width, uint32_t* dst) {
  const int64_t pairs = (width + 1) / 2, stride = amx_panel_stride(width);
  for (int64_t g = 0; g < amx_padded_rows(rows) / kAmxPanel; ++g) {
    uint32_t* out = dst + g * stride;
    const int64_t cols = std::clamp<int64_t>(rows - g * kAmxPanel, 0, kAmxPanel);
    // Pairs of k as words, a row of x per column: the pairs layout of this panel's xᵀ, 16 columns wide.
    if (cols > 0) pack_transposed_in_pairs(x + g * kAmxPanel * ld, ld, cols, width, out, kAmxPanel);
    std::fill(out + (cols > 0 ? pairs : 0) * kAmxPanel, out + stride, 0u);
  }
}

void amx_pack_row_pairs(const c10::BFloat16* b, int64_t ld, int64_t rows, int64_t width, uint32_t* dst) {
  const int64_t pairs = amx_padded_rows(rows) / 2, written = (rows + 1) / 2;
  for (int64_t cg = 0; cg < (width + 15) / 16; ++cg) {
    uint32_t* out = dst + cg * amx_row_pair_group_stride(rows);
    const int64_t cols = std::min<int64_t>(16, width - cg * 16);
    if (rows > 0) pack_rows_in_pairs(b + cg * 16, ld, rows, cols, out, kTileWordsPerRow);
    std::fill(out + (rows > 0 ? written : 0) * kTileWordsPerRow, out + pairs * kTileWordsPerRow, 0u);
  }
}

void amx_multiply_panels(const c10::BFloat16* a, int64_t lda, int64_t m, int64_t pair_blocks, const uint32_t* x,
                         int64_t panels, float* c, int64_t ldc) {
  if (m <= 0 || panels <= 0) return;
  const TileScope tiles;
  for (int64_t r = 0; r < m; r += kAmxRows) {
    const c10::BFloat16* ar = a + r * lda;
    float* cr = c + r * ldc;
    const bool two_rows = m - r > kTileRows;
    if (pair_blocks == 1) {
      if (two_rows) panels_a_resident<true, false>(ar, lda, x, panels, cr, ldc);
      else panels_a_resident<false, false>(ar, lda, x, panels, cr, ldc);
    } else if (pair_blocks == 2) {
      if (two_rows) panels_a_resident<true, true>(ar, lda, x, panels, cr, ldc);
      else panels_a_resident<false, true>(ar, lda, x, panels, cr, ldc);
    } else {
      panels_blocked(ar, lda, two_rows, pair_blocks, x, panels, cr, ldc);
    }
  }
}

void amx_multiply_add_row_pairs(const c10::BFloat16* a, int64_t lda, int64_t m, int64_t chunks, const uint32_t* b,
                                int64_t group_stride, int64_t n, float* c, int64_t ldc) {
  if (m <= 0 || chunks <= 0 || n <= 0) return;
  const int64_t col_groups = (n + 15) / 16;
  thread_local kernel_amx::CacheLineVector<float> bounce;
  for (int64_t r = 0; r < m; r += kAmxRows) {
    const int64_t rows = std::min(kAmxRows, m - r);
    const bool two_rows = rows > kTileRows;
    const int64_t tile_rows = two_rows ? kAmxRows : kTileRows;
    // C tiles are read and written whole: where C's rows or columns stop short of them, they go through a
    // zero-padded copy.
    const bool whole = rows == tile_rows && n == col_groups * 16;
    float* cr = c + r * ldc;
    float* tiles_c = cr;
    int64_t tiles_ldc = ldc;
    if (!whole) {
      tiles_ldc = col_groups * 16;
      bounce.assign(tile_rows * tiles_ldc, 0.0f);
      tiles_c = bounce.data();
      for (int64_t i = 0; i < rows; ++i) std::memcpy(tiles_c + i * tiles_ldc, cr + i * ldc, n * sizeof(float));
    }
    {
      const TileScope tiles;
      if (two_rows) row_pairs_blocked<true>(a + r * lda, lda, chunks, b, group_stride, col_groups, tiles_c, tiles_ldc);
      else row_pairs_blocked<false>(a + r * lda, lda, chunks, b, group_stride, col_groups, tiles_c, tiles_ldc);
    }
    if (!whole) {
      for (int64_t i = 0; i < rows; ++i) std::memcpy(cr + i * ldc, tiles_c + i * tiles_ldc, n * sizeof(float));
    }
  }
}

}  // namespace attn::ops::cpu
