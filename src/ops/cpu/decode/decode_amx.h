// A decode split's two products on AMX's tiles, for a step with many query rows per K/V head (a GQA group times
// several tokens, a token tree): the split's keys read where they lie as A tiles against the query rows packed as
// column panels (Sᵀ = K·Qᵀ, each C tile stored transposed), then P rounded to bfloat16 against the values packed
// as row pairs (P·V), over the products of products/amx_panels.h. The register tiles (products/row_tiles.h) read
// each key and value once per 4 rows and widen it every time: at 16 rows and more they are bound by their FMAs,
// not by the cache's stream (bench/RESULTS.md). Included by decode/decode_kernel.h in the AVX-512 variant where
// AMX is compiled; reached only where the op chose it (DecodeArgs::amx, products/route.h).

#ifndef ATTN_KERNEL_NAMESPACE
#error "define ATTN_KERNEL_NAMESPACE before including decode/decode_amx.h"
#endif

#include "ops/cpu/products/amx_panels.h"
#include "ops/cpu/products/bf16_softmax.h"
#include "ops/cpu/products/cache_line_vector.h"
#include "ops/cpu/products/row_tiles.h"

#include <c10/util/BFloat16.h>

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

namespace attn::ops::cpu::ATTN_KERNEL_NAMESPACE {
namespace {

/// A task's buffers for a split's AMX products.
struct AmxSplitScratch {
  CacheLineVector<c10::BFloat16> query, probs;  // the query rows rounded, and P rounded as whole A tiles
  CacheLineVector<c10::BFloat16> gathered;      // a paged split's rows, copied next to each other
  CacheLineVector<uint32_t> query_panels;       // the query rows as column panels (Qᵀ, the product's B)
  CacheLineVector<uint32_t> values;             // the split's values as row pairs
};

/// Score rows' stride for `keys` keys on the tiles: whole panels, since C's tiles are stored whole.
inline int64_t amx_score_stride(int64_t keys) {
  return std::max<int64_t>((keys + kAmxPanel - 1) / kAmxPanel, 1) * kAmxPanel;
}
/// Score rows to allocate for `rows` query rows: up to a whole A tile.
inline int64_t amx_score_rows(int64_t rows) { return (rows + 15) / 16 * 16; }

/// Rows [0, n) of `rows`, `width` elements each, as one matrix and its row stride: where they lie when they are
/// evenly spaced, else copied next to each other into `buffer`.
inline std::pair<const c10::BFloat16*, int64_t> rows_as_matrix(const StridedRows<c10::BFloat16>& rows, int64_t,
                                                               int64_t, CacheLineVector<c10::BFloat16>&) {
  return {rows.base, rows.stride};
}
inline std::pair<const c10::BFloat16*, int64_t> rows_as_matrix(const GatheredRows<c10::BFloat16>& rows, int64_t n,
                                                               int64_t width, CacheLineVector<c10::BFloat16>& buffer) {
  buffer.resize(n * width);
  for (int64_t c = 0; c < n; ++c) std::memcpy(buffer.data() + c * width, rows[c], width * sizeof(c10::BFloat16));
  return {buffer.data(), width};
}

/// The float rows x[r · ldx, + n) for r < rows, rounded into `dst`, `ld` elements a row (ld > n where n is
/// odd), zero past n and in the rows up to a multiple of 16: whole A tiles where ld is whole chunks of k.
/// Returns dst's data.
inline const c10::BFloat16* round_as_tiles(const float* x, int64_t ldx, int64_t rows, int64_t n, int64_t ld,
                                           CacheLineVector<c10::BFloat16>& dst) {
  dst.assign(amx_score_rows(rows) * ld, c10::BFloat16(0.0f));
  for (int64_t r = 0; r < rows; ++r) round_to_bfloat16(x + r * ldx, n, dst.data() + r * ld);
  return dst.data();
}

/// The rows' first element and stride where they are evenly spaced; nullptr for gathered rows.
inline const c10::BFloat16* strided_base(const StridedRows<c10::BFloat16>& rows, int64_t& stride) {
  stride = rows.stride;
  return rows.base;
}
inline const c10::BFloat16* strided_base(const GatheredRows<c10::BFloat16>&, int64_t& stride) {
  stride = 0;
  return nullptr;
}

/// s[r · lds + c] = scale · q_r · k_c for the `rows` packed query rows q (float, exactly bfloat16: a bfloat16
/// query widened) and the keys k[0, n), the keys read where they lie as A tiles (Sᵀ = K·Qᵀ, the query rows as
/// column panels), and the split's values v[0, n) asked into L2 meanwhile: lds >= amx_score_stride(n), and s
/// holds amx_score_rows(rows) rows (C's tiles are stored whole; the rows and columns past the product are
/// written, never read).
template <typename Rows>
void amx_score_split(const float* q, int64_t rows, const Rows& k, const Rows& v, int64_t n, int64_t dk, int64_t dv,
                     float scale, float* s, int64_t lds, AmxSplitScratch& st) {
  if (n == 0) return;
  const int64_t ldq = (dk + 1) / 2 * 2;  // an odd row's rounding writes a zero past it
  const c10::BFloat16* query = round_as_tiles(q, dk, rows, dk, ldq, st.query);
  st.query_panels.resize(amx_panel_words(rows, dk));
  amx_pack_column_panels(query, ldq, rows, dk, st.query_panels.data());
  const auto [keys, ld] = rows_as_matrix(k, n, dk, st.gathered);
  int64_t ldv = 0;
  const c10::BFloat16* values = strided_base(v, ldv);
  amx_multiply_rows_transposed(keys, ld, n, dk, st.query_panels.data(), rows, scale, s, lds, values, ldv,
                               dv * static_cast<int64_t>(sizeof(c10::BFloat16)));
}

/// acc[r · dv, + dv) += Σ_{c < n} w[r · ldw + c] · v_c for r < rows: the weights rounded to bfloat16, the values
/// v[0, n) packed as row pairs (zero past n: a key past the product never meets a weight).
template <typename Rows>
void amx_weighted_sum_split(const float* w, int64_t ldw, int64_t rows, int64_t n, const Rows& v, int64_t dv,
                            float* acc, AmxSplitScratch& st) {
  if (n == 0) return;
  const int64_t chunks = (n + kAmxKeyChunk - 1) / kAmxKeyChunk;
  const c10::BFloat16* p = round_as_tiles(w, ldw, rows, n, chunks * kAmxKeyChunk, st.probs);
  const auto [values, ld] = rows_as_matrix(v, n, dv, st.gathered);
  st.values.resize(amx_row_pair_words(n, dv));
  amx_pack_row_pairs(values, ld, n, dv, st.values.data());
  amx_multiply_add_row_pairs(p, chunks * kAmxKeyChunk, rows, chunks, st.values.data(), amx_row_pair_group_stride(n),
                             dv, acc, dv);
}

}  // namespace
}  // namespace attn::ops::cpu::ATTN_KERNEL_NAMESPACE
