#pragma once
// The AMX route's right operands, packed as whole tiles, and its two products over them. A tile is 16 rows of 64
// bytes; tdpbf16ps multiplies an A tile (16 rows × 16 pairs of k) by a B tile (16 pairs of k × 16 columns, a
// pair a 32-bit word) into a C tile of 16 × 16 floats. Every B tile these products read is 1 KB of contiguous
// memory, in one of two layouts packed once per call and head:
//   column panels  B [k, n] given by its columns, as the rows of a [n, k] matrix X (K for Q·Kᵀ, V for dO·Vᵀ):
//                  panel g holds, for each pair p of k (zero past k, up to a whole number of 16-pair blocks),
//                  the words (X[16g + c, 2p], X[16g + c, 2p + 1]) for c < 16, zero past X's last row;
//   row pairs      B [k, n] given by its rows (V for P·V; dO, Q and K for the backward's dV, dK and dQ): column
//                  group c holds, for each pair of rows (2m, 2m + 1), the words (B[2m, 16c + l], B[2m + 1,
//                  16c + l]) for l < 16, zero past n and past B's last row.
// Both pad the rows of X (or B) to a whole number of kAmxKeyChunk (one step of the row-pairs product: 16 pairs).
// Only amx_panels_amx.cpp is compiled with AMX enabled: call these only where hardware_has_amx()
// (isa/capability.h).

#include <c10/util/BFloat16.h>

#include <cstdint>

namespace attn::ops::cpu {

/// Rows of A per step of the products: two A tiles of 16.
inline constexpr int64_t kAmxRows = 32;
/// Columns per panel (a B tile's columns), and rows per step of the row-pairs product (a B tile's 16 pairs).
inline constexpr int64_t kAmxPanel = 16;
inline constexpr int64_t kAmxKeyChunk = 32;
/// Pairs of k per tile row.
inline constexpr int64_t kAmxTilePairs = 16;

/// 16-pair blocks of k for a k of `width` elements.
inline int64_t amx_pair_blocks(int64_t width) { return ((width + 1) / 2 + kAmxTilePairs - 1) / kAmxTilePairs; }
/// Rows as packed: rounded up to a whole number of chunks.
inline int64_t amx_padded_rows(int64_t rows) { return (rows + kAmxKeyChunk - 1) / kAmxKeyChunk * kAmxKeyChunk; }
/// 32-bit words of a packed [rows, width] X as column panels, and of a packed [rows, width] B as row pairs.
inline int64_t amx_panel_words(int64_t rows, int64_t width) {
  return amx_padded_rows(rows) * amx_pair_blocks(width) * kAmxTilePairs;
}
inline int64_t amx_row_pair_words(int64_t rows, int64_t width) {
  return (width + 15) / 16 * amx_padded_rows(rows) / 2 * 16;
}
/// Words from one column panel to the next, and from one column group of row pairs to the next.
inline int64_t amx_panel_stride(int64_t width) { return amx_pair_blocks(width) * kAmxTilePairs * kAmxPanel; }
inline int64_t amx_row_pair_group_stride(int64_t rows) { return amx_padded_rows(rows) / 2 * 16; }
/// Where row `row` (a multiple of kAmxPanel, or of kAmxKeyChunk for row pairs) of a packed operand begins.
inline int64_t amx_panel_offset(int64_t row, int64_t width) { return row / kAmxPanel * amx_panel_stride(width); }
inline int64_t amx_row_pair_offset(int64_t row) { return row / 2 * 16; }

/// Packs the [rows, width] x (row stride ld) as column panels into dst (amx_panel_words(rows, width) words).
void amx_pack_column_panels(const c10::BFloat16* x, int64_t ld, int64_t rows, int64_t width, uint32_t* dst);
/// Packs the [rows, width] b (row stride ld) as row pairs into dst (amx_row_pair_words(rows, width) words).
void amx_pack_row_pairs(const c10::BFloat16* b, int64_t ld, int64_t rows, int64_t width, uint32_t* dst);

/// c[r, j] = A[r] · X[j] for r < m and j < 16 · panels, unscaled and stored, not added: a is [m, 32 · pair_blocks]
/// row-major (row stride lda elements) and zero past k, with rows up to the next multiple of 16 readable and
/// finite (zero); x its first panel as column panels. C's tiles are stored whole: c must hold the rows up to the
/// next multiple of 16 (they get the products of A's zero rows); nothing past them is written.
void amx_multiply_panels(const c10::BFloat16* a, int64_t lda, int64_t m, int64_t pair_blocks, const uint32_t* x,
                         int64_t panels, float* c, int64_t ldc);

/// c[r · ldc + j] = scale · Σ_i x[r, i] · a[j · lda + i] for r < m and j < n: the [n, width] matrix a (the keys
/// of a decoding step) read where it lies as A tiles of 16 of its rows, against x (m rows of `width`) packed as
/// column panels, each C tile (16 of a's rows by 16 of x's) written transposed. a's rows are read only up to
/// `width` and n (a partial tile goes through a zero-padded copy); c must hold m rounded up to 16 rows and n
/// rounded up to 16 columns, whose extra elements get products of zeros. `prefetch` rows (n of them, row stride
/// ld_prefetch, bytes_prefetch bytes each; nullptr for none) are asked into L2 as the products go: the values that
/// follow the scores.
void amx_multiply_rows_transposed(const c10::BFloat16* a, int64_t lda, int64_t n, int64_t width, const uint32_t* x,
                                  int64_t m, float scale, float* c, int64_t ldc, const c10::BFloat16* prefetch,
                                  int64_t ld_prefetch, int64_t bytes_prefetch);

/// c[r, j] += Σ_k A[r, k] · B[k, j] for r < m, j < n, k < kAmxKeyChunk · chunks: a is [m, lda] bfloat16, finite
/// and zero past the product's k, with rows up to the next multiple of 16 readable and zero; b is the product's
/// first chunk of column group 0 as row pairs, and the next column group lies group_stride words further on.
void amx_multiply_add_row_pairs(const c10::BFloat16* a, int64_t lda, int64_t m, int64_t chunks, const uint32_t* b,
                                int64_t group_stride, int64_t n, float* c, int64_t ldc);

}  // namespace attn::ops::cpu
