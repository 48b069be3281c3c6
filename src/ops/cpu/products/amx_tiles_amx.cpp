// The AMX product kernel (ops/cpu/products/amx_tiles.h). CMake compiles this file alone with AMX and AVX-512
// enabled; the callers reach it only where hardware_has_amx().

#include "ops/cpu/products/amx_tiles.h"

#include <c10/util/Exception.h>

#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <vector>

namespace attn::ops::cpu {
namespace {

// Every tile is 16 rows of 64 bytes: 16 pairs of k in an A row, 16 columns of pairs in a B row, 16 floats in a
// C row. Tiles 0-3 hold C for two row groups by two column groups, 4-5 the two A tiles, 6-7 the two B tiles.
constexpr int64_t kTileRows = 16;
constexpr int64_t kTilePairs = 16;
constexpr int64_t kTileCols = 16;
constexpr int64_t kTileWords = kTileRows * kTilePairs;  // 32-bit words (pairs, or floats) in a tile
constexpr int64_t kBlock = 2 * kTileRows;                // rows (and columns) of C per block of four C tiles

struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t bytes_per_row[16] = {};
  uint8_t rows[16] = {};
};
static_assert(sizeof(TileConfig) == 64, "ldtilecfg reads 64 bytes");

const TileConfig& eight_full_tiles() {
  static const TileConfig config = [] {
    TileConfig c;
    for (int t = 0; t < 8; ++t) c.bytes_per_row[t] = 64, c.rows[t] = kTileRows;
    return c;
  }();
  return config;
}

/// Where one tile's rows lie: the first and the bytes from one to the next.
struct TileSource {
  const void* data;
  int64_t stride;
};

/// One call's operands as tiles. A tile is read where it lies when it is whole (16 rows of A, all 16 pairs);
/// the others are copied once into zero-padded tiles, so that no load reads past the operands and the pad
/// never meets a non-finite number. A whose pairs are not adjacent (sp != 2, a transposed pairs layout) is
/// copied whole.
class AmxTileSources {
 public:
  AmxTileSources(int64_t m, int64_t n, int64_t pairs, const LeftOperand& a, const PairsOperand& b)
      : a_(a), b_(b), m_(m), pairs_(pairs), row_groups_((m + kTileRows - 1) / kTileRows),
        pair_blocks_((pairs + kTilePairs - 1) / kTilePairs), whole_pair_blocks_(pairs / kTilePairs),
        direct_a_(a.sp == 2), b_edge_ld_((n + kTileCols - 1) / kTileCols * kTileCols) {
    thread_local std::vector<uint32_t> a_scratch, b_scratch;
    a_edges_ = &a_scratch;
    b_edge_ = &b_scratch;
    copy_a_edges();
    copy_b_edge();
  }

  int64_t pair_blocks() const { return pair_blocks_; }

  /// A's tile of row group g and pair block kb.
  TileSource a(int64_t g, int64_t kb) const {
    if (a_whole(g, kb)) return {a_.data + g * kTileRows * a_.si + kb * 2 * kTilePairs, a_.si * 2};
    return {a_edges_->data() + (g * pair_blocks_ + kb) * kTileWords, 64};
  }
  /// B's tile of pair block kb and the 16 columns from j (B's pairs layout may be read up to the next multiple
  /// of 16 columns).
  TileSource b(int64_t kb, int64_t j) const {
    if (kb < whole_pair_blocks_) return {b_.data + kb * kTilePairs * b_.ld + j, b_.ld * 4};
    return {b_edge_->data() + j, b_edge_ld_ * 4};
  }

 private:
  bool a_whole(int64_t g, int64_t kb) const {
    return direct_a_ && (g + 1) * kTileRows <= m_ && kb < whole_pair_blocks_;
  }

  /// Each tile of A that is not read where it lies: zeros, then its part of A.
  void copy_a_edges() {
    const size_t words = static_cast<size_t>(row_groups_ * pair_blocks_ * kTileWords);
    if (a_edges_->size() < words) a_edges_->resize(words);
    for (int64_t g = 0; g < row_groups_; ++g) {
      for (int64_t kb = 0; kb < pair_blocks_; ++kb) {
        if (a_whole(g, kb)) continue;
        uint32_t* tile = a_edges_->data() + (g * pair_blocks_ + kb) * kTileWords;
        std::fill(tile, tile + kTileWords, 0u);
        const int64_t rows = std::min(kTileRows, m_ - g * kTileRows);
        const int64_t pairs = std::min(kTilePairs, pairs_ - kb * kTilePairs);
        for (int64_t r = 0; r < rows; ++r) {
          const c10::BFloat16* row = a_.data + (g * kTileRows + r) * a_.si + kb * kTilePairs * a_.sp;
          for (int64_t p = 0; p < pairs; ++p) std::memcpy(tile + r * kTilePairs + p, row + p * a_.sp, 4);
        }
      }
    }
  }

  /// The last pair block, when it holds fewer than 16 pairs: its pairs, then zero rows.
  void copy_b_edge() {
    const int64_t pairs = pairs_ - whole_pair_blocks_ * kTilePairs;
    if (pairs == 0) return;
    b_edge_->assign(kTilePairs * b_edge_ld_, 0u);
    for (int64_t p = 0; p < pairs; ++p) {
      std::memcpy(b_edge_->data() + p * b_edge_ld_, b_.data + (whole_pair_blocks_ * kTilePairs + p) * b_.ld,
                  b_edge_ld_ * 4);
    }
  }

  LeftOperand a_;
  PairsOperand b_;
  int64_t m_, pairs_, row_groups_, pair_blocks_, whole_pair_blocks_;
  bool direct_a_;
  int64_t b_edge_ld_;
  std::vector<uint32_t>* a_edges_;
  std::vector<uint32_t>* b_edge_;
};

/// The four (or fewer) C tiles of row groups g, g + 1 and the columns j .. j + 32, summed over every pair
/// block, stored to acc ([32, 32] floats).
template <bool kTwoRows, bool kTwoCols>
void multiply_block(const AmxTileSources& t, int64_t g, int64_t j, float* acc) {
  _tile_zero(0);
  if constexpr (kTwoCols) _tile_zero(1);
  if constexpr (kTwoRows) _tile_zero(2);
  if constexpr (kTwoRows && kTwoCols) _tile_zero(3);
  for (int64_t kb = 0; kb < t.pair_blocks(); ++kb) {
    const TileSource a0 = t.a(g, kb), b0 = t.b(kb, j);
    _tile_loadd(4, a0.data, a0.stride);
    _tile_loadd(6, b0.data, b0.stride);
    if constexpr (kTwoCols) {
      const TileSource b1 = t.b(kb, j + kTileCols);
      _tile_loadd(7, b1.data, b1.stride);
    }
    if constexpr (kTwoRows) {
      const TileSource a1 = t.a(g + 1, kb);
      _tile_loadd(5, a1.data, a1.stride);
    }
    _tile_dpbf16ps(0, 4, 6);
    if constexpr (kTwoCols) _tile_dpbf16ps(1, 4, 7);
    if constexpr (kTwoRows) _tile_dpbf16ps(2, 5, 6);
    if constexpr (kTwoRows && kTwoCols) _tile_dpbf16ps(3, 5, 7);
  }
  constexpr int64_t ld = kBlock * 4;  // bytes per row of acc
  _tile_stored(0, acc, ld);
  if constexpr (kTwoCols) _tile_stored(1, acc + kTileCols, ld);
  if constexpr (kTwoRows) _tile_stored(2, acc + kTileRows * kBlock, ld);
  if constexpr (kTwoRows && kTwoCols) _tile_stored(3, acc + kTileRows * kBlock + kTileCols, ld);
}

/// A whole block's four C tiles accumulated where C lies, for alpha 1 without lane maxima (P·V and the backward
/// pass's dV and dP), where going through acc would only copy: loaded from C (beta 1) or zeroed (beta 0), summed
/// over every pair block in place, stored back.
void multiply_block_into_c(const AmxTileSources& t, int64_t g, int64_t j, bool accumulate, float* c, int64_t ldc) {
  float* c0 = c + g * kTileRows * ldc + j;
  float* c1 = c0 + kTileCols;
  float* c2 = c0 + kTileRows * ldc;
  float* c3 = c2 + kTileCols;
  const int64_t ld = ldc * static_cast<int64_t>(sizeof(float));
  if (accumulate) {
    _tile_loadd(0, c0, ld);
    _tile_loadd(1, c1, ld);
    _tile_loadd(2, c2, ld);
    _tile_loadd(3, c3, ld);
  } else {
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
  }
  for (int64_t kb = 0; kb < t.pair_blocks(); ++kb) {
    const TileSource a0 = t.a(g, kb), a1 = t.a(g + 1, kb), b0 = t.b(kb, j), b1 = t.b(kb, j + kTileCols);
    _tile_loadd(4, a0.data, a0.stride);
    _tile_loadd(6, b0.data, b0.stride);
    _tile_loadd(7, b1.data, b1.stride);
    _tile_loadd(5, a1.data, a1.stride);
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
  _tile_stored(0, c0, ld);
  _tile_stored(1, c1, ld);
  _tile_stored(2, c2, ld);
  _tile_stored(3, c3, ld);
}

/// 16 floats: AVX-512 registers where this file is built (GCC's vector extensions, so that the same code also
/// builds without them).
typedef float Floats16 __attribute__((vector_size(64)));

inline Floats16 load16(const float* p) {
  Floats16 v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}
inline void store16(float* p, Floats16 v) { std::memcpy(p, &v, sizeof(v)); }

/// c[0, 16) = alpha · acc + beta · c, and lm[l] = max(lm[l], c[l]).
inline void store_whole(const float* acc, float alpha, bool accumulate, float* c, float* lm) {
  Floats16 x = load16(acc) * alpha;
  if (accumulate) x += load16(c);
  store16(c, x);
  if (lm) {
    const Floats16 m = load16(lm);
    store16(lm, x > m ? x : m);
  }
}

/// The same for the first `cols` (< 16) columns only.
inline void store_part(const float* acc, int64_t cols, float alpha, bool accumulate, float* c, float* lm) {
  for (int64_t l = 0; l < cols; ++l) {
    const float x = alpha * acc[l] + (accumulate ? c[l] : 0.0f);
    c[l] = x;
    if (lm) lm[l] = x > lm[l] ? x : lm[l];
  }
}

}  // namespace

void amx_gemm(int64_t m, int64_t n, int64_t pairs, float alpha, LeftOperand a, PairsOperand b, float beta, float* c,
              int64_t ldc, float* lane_max) {
  TORCH_INTERNAL_ASSERT(beta == 0.0f || beta == 1.0f, "amx_gemm: beta must be 0 or 1, got ", beta);
  if (m == 0 || n == 0) return;
  const AmxTileSources tiles(m, n, pairs, a, b);
  alignas(64) float acc[kBlock * kBlock];
  _tile_loadconfig(&eight_full_tiles());
  const int64_t row_groups = (m + kTileRows - 1) / kTileRows;
  const bool plain = alpha == 1.0f && lane_max == nullptr;
  for (int64_t g = 0; g < row_groups; g += 2) {
    const bool two_rows = g + 1 < row_groups;
    const int64_t rows = std::min(kBlock, m - g * kTileRows);
    for (int64_t j = 0; j < n; j += kBlock) {
      const bool two_cols = j + kTileCols < n;
      if (plain && rows == kBlock && j + kBlock <= n) {
        multiply_block_into_c(tiles, g, j, beta != 0.0f, c, ldc);
        continue;
      }
      if (two_rows && two_cols) multiply_block<true, true>(tiles, g, j, acc);
      else if (two_rows) multiply_block<true, false>(tiles, g, j, acc);
      else if (two_cols) multiply_block<false, true>(tiles, g, j, acc);
      else multiply_block<false, false>(tiles, g, j, acc);
      const int64_t cols = std::min(kBlock, n - j);
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t i = g * kTileRows + r;
        float* lm = lane_max ? lane_max + i * kTileCols : nullptr;
        if (lm && j == 0) std::fill(lm, lm + kTileCols, -std::numeric_limits<float>::infinity());
        for (int64_t h = 0; h < cols; h += kTileCols) {
          const int64_t part = std::min(kTileCols, cols - h);
          const float* from = acc + r * kBlock + h;
          float* to = c + i * ldc + j + h;
          // Lane l of a row's maxima takes the columns j ≡ l (mod 16): the same lanes for each half.
          if (part == kTileCols) store_whole(from, alpha, beta != 0.0f, to, lm);
          else store_part(from, part, alpha, beta != 0.0f, to, lm);
        }
      }
    }
  }
  _tile_release();
}

}  // namespace attn::ops::cpu
