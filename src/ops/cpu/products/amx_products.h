#pragma once
// The AMX route: every tile product of both passes on AMX's tiles, over right operands packed once per call and
// head as whole B tiles (products/amx_panels.h): K and V as column panels (Q·Kᵀ, dO·Vᵀ), and V, dO, Q and K as
// row pairs (P·V, Pᵀ·dO, dSᵀ·Q, dS·K). The softmax and its backward stay on AVX-512 in float; P and dS are
// rounded to bfloat16 for the products they feed, as the pairs route's (products/pair_products.h).
//
// Forward: 32 query rows a tile (kQueryRows), so that a tile's scores (64 KB) and P stay near the core. A plain
// tile (no masks, no score terms) keeps its scores unscaled: the lane maxima are taken from them and scaled, and
// the softmax's exp folds the scale into its first FMA, so no pass scales the scores.
// Backward: 256 query rows a tile (kAmxBackwardQueryRows), and the scale of dK and dQ folded into dS as it is
// rounded, in the pass that forms dS from P and dP and rounds Pᵀ where the tile is whole chunks (grad_scores).
// AVX-512 variant, on a CPU with AMX only.

#include "ops/cpu/math/kernel_layout.h"
#include "ops/cpu/math/rows.h"
#include "ops/cpu/products/amx_panels.h"
#include "ops/cpu/products/bf16_softmax.h"
#include "ops/cpu/products/cache_line_vector.h"
#include "ops/cpu/products/kept_buffer.h"
#include "ops/cpu/products/operands.h"
#include "ops/cpu/products/uninitialised.h"

#include <ATen/Parallel.h>
#include <c10/util/BFloat16.h>

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

namespace attn::ops::cpu::ATTN_KERNEL_NAMESPACE {

/// A right operand packed once per call, for each head of every batch row (h = b · heads + head).
struct AmxPacked {
  Uninitialised<uint32_t> own;  // where the operand is too large for the calling thread's kept buffer
  uint32_t* data = nullptr;
  int64_t words = 0, heads = 0;
  const uint32_t* of(int64_t b, int64_t h) const { return data + (b * heads + h) * words; }
};

enum class AmxLayout { ColumnPanels, RowPairs };

/// x's [rows, width] matrix of every head, packed in `layout`, in the calling thread's kept buffer for `Slot`
/// (one per operand that a call holds at once) where it fits.
template <typename Slot>
AmxPacked amx_pack(const View4<const c10::BFloat16>& x, int64_t batch, int64_t heads, int64_t rows, int64_t width,
                   AmxLayout layout) {
  AmxPacked packed;
  packed.heads = heads;
  packed.words = layout == AmxLayout::ColumnPanels ? amx_panel_words(rows, width) : amx_row_pair_words(rows, width);
  packed.data = kept_buffer<Slot>(batch * heads * packed.words, kKeptPackBytes, packed.own);
  // No rows: nothing to pack, and the data pointer may be null (no row to address).
  if (rows == 0) return packed;
  at::parallel_for(0, batch * heads, 1, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const c10::BFloat16* src = x.row(i / heads, i % heads, 0);
      uint32_t* dst = packed.data + i * packed.words;
      if (layout == AmxLayout::ColumnPanels) amx_pack_column_panels(src, x.si, rows, width, dst);
      else amx_pack_row_pairs(src, x.si, rows, width, dst);
    }
  });
  return packed;
}

/// The rows [i, i + rows) of head (b, h) of x as a product's left operand: whole A tiles of 16 rows by 32 ·
/// pair blocks, zero past `width` and past its rows. Read where they lie when they are whole (a width of whole
/// pair blocks, rows to a multiple of 16); otherwise copied, once for as long as the same rows are asked for.
struct AmxRows {
  CacheLineVector<c10::BFloat16> data;
  int64_t b = -1, h = -1, i = -1, rows = 0;
  /// The operand's first element and row stride.
  std::pair<const c10::BFloat16*, int64_t> of(const View4<const c10::BFloat16>& x, int64_t width, int64_t tb,
                                              int64_t th, int64_t ti, int64_t trows) {
    const int64_t ld = amx_pair_blocks(width) * 2 * kAmxTilePairs;
    if (width == ld && trows % 16 == 0) return {x.row(tb, th, ti), x.si};
    if (b != tb || h != th || i != ti || rows != trows) {
      data.assign((trows + 15) / 16 * 16 * ld, c10::BFloat16(0.0f));
      for (int64_t r = 0; r < trows; ++r) std::memcpy(data.data() + r * ld, x.row(tb, th, ti + r), width * 2);
      b = tb, h = th, i = ti, rows = trows;
    }
    return {data.data(), ld};
  }
};

inline int64_t amx_chunks(int64_t k) { return (k + kAmxKeyChunk - 1) / kAmxKeyChunk; }
inline int64_t amx_panels(int64_t n) { return (n + kAmxPanel - 1) / kAmxPanel; }

/// The packed rows [row, row + n) of head (b, h) as column panels: in the call's pack where `row` starts a panel,
/// else packed into `scratch` (a window's edge, a packed sequence). Panels read rows past n up to a whole panel,
/// which only give columns of C that no one reads.
inline const uint32_t* amx_panels_at(const AmxPacked& packed, const View4<const c10::BFloat16>& x, int64_t b,
                                     int64_t h, int64_t row, int64_t n, int64_t width,
                                     CacheLineVector<uint32_t>& scratch) {
  if (row % kAmxPanel == 0) return packed.of(b, h) + amx_panel_offset(row, width);
  scratch.resize(amx_panel_words(n, width));
  amx_pack_column_panels(x.row(b, h, row), x.si, n, width, scratch.data());
  return scratch.data();
}

/// The packed rows [row, row + n) of head (b, h) as the right operand of a row-pairs product, whose k runs in
/// whole chunks: the whole chunks from the call's pack where `row` starts one, and a last chunk that stops short
/// of 32 rows copied zero-padded, because the rows after it in the pack belong to other keys or queries (a key
/// past a causal band, another sequence), whose Inf or NaN must not meet P's or dS's zeros there. Any other
/// start packs all n rows into scratch.
struct AmxRowPairs {
  const uint32_t* whole = nullptr;  // the whole chunks, column groups group_stride words apart
  int64_t group_stride = 0, whole_chunks = 0;
  const uint32_t* tail = nullptr;   // the last, zero-padded chunk (nullptr: none), column groups 256 words apart
};

inline AmxRowPairs amx_row_pairs_at(const AmxPacked& packed, const View4<const c10::BFloat16>& x, int64_t b,
                                    int64_t h, int64_t row, int64_t n, int64_t width, int64_t all_rows,
                                    CacheLineVector<uint32_t>& scratch) {
  AmxRowPairs out;
  if (n == 0) return out;  // an empty product (and maybe no data to address)
  if (row % kAmxKeyChunk != 0) {
    scratch.resize(amx_row_pair_words(n, width));
    amx_pack_row_pairs(x.row(b, h, row), x.si, n, width, scratch.data());
    out.whole = scratch.data();
    out.group_stride = amx_row_pair_group_stride(n);
    out.whole_chunks = amx_chunks(n);
    return out;
  }
  out.whole = packed.of(b, h) + amx_row_pair_offset(row);
  out.group_stride = amx_row_pair_group_stride(all_rows);
  // Past the head's last row the pack holds zeros: a chunk that ends there is whole as it is.
  const bool short_tail = n % kAmxKeyChunk != 0 && row + n < all_rows;
  out.whole_chunks = short_tail ? n / kAmxKeyChunk : amx_chunks(n);
  if (short_tail) {
    const int64_t first = out.whole_chunks * kAmxKeyChunk;
    scratch.resize(amx_row_pair_words(n - first, width));
    amx_pack_row_pairs(x.row(b, h, row + first), x.si, n - first, width, scratch.data());
    out.tail = scratch.data();
  }
  return out;
}

/// c += A·B for B from amx_row_pairs_at: its whole chunks, then its tail against A's last chunk.
inline void amx_multiply_add(const c10::BFloat16* a, int64_t lda, int64_t m, const AmxRowPairs& b, int64_t n,
                             float* c, int64_t ldc) {
  amx_multiply_add_row_pairs(a, lda, m, b.whole_chunks, b.whole, b.group_stride, n, c, ldc);
  if (b.tail) {
    amx_multiply_add_row_pairs(a + b.whole_chunks * kAmxKeyChunk, lda, m, 1, b.tail, amx_row_pair_group_stride(1), n,
                               c, ldc);
  }
}

class AmxForwardProducts {
 public:
  using BFloat16 = c10::BFloat16;

  /// A task's own buffers: its query rows as whole tiles, P rounded, and the keys and values of a tile that does
  /// not start on a packed panel or chunk.
  struct Scratch {
    AmxRows query;
    CacheLineVector<BFloat16> probs;  // [kAmxRows, probs_ld]
    int64_t probs_ld = 0;
    CacheLineVector<uint32_t> keys, values;
    bool unscaled = false;  // the tile's scores are Q·Kᵀ, the scale still to be applied (a plain tile)
  };
  static constexpr bool kRowMaxima = true;
  static constexpr int64_t kQueryRows = kAmxRows;
  static constexpr int64_t kScorePadding = 16;  // one line a row of the score tile (flash/plan.h)

  explicit AmxForwardProducts(const TileOperands<float, BFloat16>& operands)
      : p_(operands),
        keys_(amx_pack<PackSlot<0>>(p_.k, p_.batch, p_.kv_heads, p_.tk, p_.dk, AmxLayout::ColumnPanels)),
        values_(amx_pack<PackSlot<1>>(p_.v, p_.batch, p_.kv_heads, p_.tk, p_.dv, AmxLayout::RowPairs)) {}

  /// S for the tile: unscaled where lane_max is asked for (a plain tile) and the scale is positive, with each
  /// row's maxima taken from the unscaled scores and scaled; scaled in place otherwise, for the masks and terms.
  void scores(Scratch& st, const TileAt& t, float* s, int64_t lds, float* lane_max) const {
    product(st, t, s, lds);
    st.unscaled = lane_max != nullptr && p_.scale > 0.0f;
    if (st.unscaled) {
      for (int64_t r = 0; r < t.rows; ++r) lane_maxima(s + r * lds, t.cols, p_.scale, lane_max + r * kLanes);
    } else {
      for (int64_t r = 0; r < t.rows; ++r) scale_row(s + r * lds, t.cols, p_.scale);
      // A plain tile with a scale <= 0: its maxima from the scaled row.
      if (lane_max) {
        for (int64_t r = 0; r < t.rows; ++r) lane_maxima(s + r * lds, t.cols, 1.0f, lane_max + r * kLanes);
      }
    }
  }
  /// S = Q·Kᵀ for a plain tile whose exp applies the scale (positive) and finds the row maxima in its own pass
  /// (flash/plan.h's UnscaledScores): no pass of its own over the tile.
  void unscaled_scores(Scratch& st, const TileAt& t, float* s, int64_t lds) const {
    product(st, t, s, lds);
    st.unscaled = true;
  }

  /// P rounded to bfloat16 for P·V, zero up to the tile's whole chunks; the float P stays in the row only where
  /// the values' fallback (a non-finite value in the tile) needs it. Where `peak` is given (finite values only),
  /// *peak = the row's largest scaled score, from the same pass.
  float exp_sum(Scratch& st, int64_t r, float* row, int64_t cols, float max, bool values_finite,
                float* peak = nullptr) const {
    if (!values_finite) {
      if (st.unscaled) scale_row(row, cols, p_.scale);
      return exp_shifted_sum(row, cols, max);
    }
    const float scale = st.unscaled ? p_.scale : 1.0f;
    const float sum = exp_round_sum(row, cols, scale, max, st.probs.data() + r * st.probs_ld,
                                    amx_chunks(cols) * kAmxKeyChunk, peak);
    if (peak) *peak *= scale;
    return sum;
  }
  void no_keys_yet(Scratch& st, int64_t r, float* row, int64_t cols) const {
    std::fill(row, row + cols, 0.0f);
    std::fill_n(st.probs.data() + r * st.probs_ld, amx_chunks(cols) * kAmxKeyChunk, BFloat16(0.0f));
  }
  /// acc += P·V with the rounded P (exp_sum), not `p`.
  void add_values(Scratch& st, const TileAt& t, const float* /*p*/, int64_t /*ldp*/, float* acc,
                  int64_t ldacc) const {
    const int64_t chunks = amx_chunks(t.cols);
    const AmxRowPairs values = amx_row_pairs_at(values_, p_.v, t.b, t.hk, t.j, t.cols, p_.dv, p_.tk, st.values);
    // The tiles read P's rows in sixteens: rows past the tile's are zeros.
    for (int64_t r = t.rows; r < (t.rows + 15) / 16 * 16; ++r) {
      std::fill_n(st.probs.data() + r * st.probs_ld, chunks * kAmxKeyChunk, BFloat16(0.0f));
    }
    amx_multiply_add(st.probs.data(), st.probs_ld, t.rows, values, p_.dv, acc, ldacc);
  }

 private:
  static constexpr int64_t kLanes = 16;

  /// S = Q·Kᵀ into s, and P's buffer sized for the tile.
  void product(Scratch& st, const TileAt& t, float* s, int64_t lds) const {
    const auto q = st.query.of(p_.q, p_.dk, t.b, t.h, t.i, t.rows);
    const uint32_t* keys = amx_panels_at(keys_, p_.k, t.b, t.hk, t.j, t.cols, p_.dk, st.keys);
    amx_multiply_panels(q.first, q.second, t.rows, amx_pair_blocks(p_.dk), keys, amx_panels(t.cols), s, lds);
    st.probs_ld = amx_chunks(lds) * kAmxKeyChunk + kAmxKeyChunk;
    if (static_cast<int64_t>(st.probs.size()) < kAmxRows * st.probs_ld) {
      st.probs.assign(kAmxRows * st.probs_ld, BFloat16(0.0f));
    }
  }

  /// lanes[l] = scale · the maximum of row[c] over the columns c ≡ l (mod 16), -inf where there is none; NaN
  /// may or may not reach it (as the other routes' epilogues).
  static void lane_maxima(const float* row, int64_t cols, float scale, float* lanes) {
    // Four chains, so that vmaxps's latency does not bound a row of 512.
    __m512 m = _mm512_set1_ps(kNegInf<float>), m1 = m, m2 = m, m3 = m;
    int64_t c = 0;
    for (; c + 64 <= cols; c += 64) {
      m = _mm512_max_ps(m, _mm512_loadu_ps(row + c));
      m1 = _mm512_max_ps(m1, _mm512_loadu_ps(row + c + 16));
      m2 = _mm512_max_ps(m2, _mm512_loadu_ps(row + c + 32));
      m3 = _mm512_max_ps(m3, _mm512_loadu_ps(row + c + 48));
    }
    m = _mm512_max_ps(_mm512_max_ps(m, m1), _mm512_max_ps(m2, m3));
    for (; c + 16 <= cols; c += 16) m = _mm512_max_ps(m, _mm512_loadu_ps(row + c));
    if (c < cols) {
      const __mmask16 part = static_cast<__mmask16>((1u << (cols - c)) - 1u);
      m = _mm512_mask_max_ps(m, part, m, _mm512_maskz_loadu_ps(part, row + c));
    }
    _mm512_storeu_ps(lanes, _mm512_mul_ps(m, _mm512_set1_ps(scale)));
  }

  static void scale_row(float* row, int64_t cols, float scale) {
    const __m512 v = _mm512_set1_ps(scale);
    int64_t c = 0;
    for (; c + 16 <= cols; c += 16) _mm512_storeu_ps(row + c, _mm512_mul_ps(v, _mm512_loadu_ps(row + c)));
    for (; c < cols; ++c) row[c] *= scale;
  }

  friend class AmxBackwardProducts;

  const TileOperands<float, BFloat16>& p_;
  AmxPacked keys_, values_;
};

/// Query rows of a backward tile: the K of dV and dK, so that their accumulators are loaded into the tiles and
/// stored back once per 256 rows rather than per 64 (bench/RESULTS.md, issue 32, third part).
inline constexpr int64_t kAmxBackwardQueryRows = 256;

class AmxBackwardProducts {
 public:
  using BFloat16 = c10::BFloat16;

  /// A task's own buffers: the left operands as whole tiles (Q and dO rows copied; Pᵀ, dSᵀ and dS rounded), and
  /// the packed rows of a tile that does not start on a packed panel or chunk.
  struct Scratch {
    AmxRows query, grad_out;
    CacheLineVector<BFloat16> probs_t, grad_scores_t, grad_scores;
    CacheLineVector<uint32_t> keys, values, key_pairs, query_pairs, grad_out_pairs;
    bool rounded_by_grad_scores = false;  // probs_t, grad_scores_t and grad_scores hold this tile's (grad_scores())
  };
  static constexpr bool kRowMaxima = false;
  static constexpr int64_t kQueryRows = kAmxBackwardQueryRows;

  AmxBackwardProducts(const TileOperands<float, BFloat16>& operands, const View4<const BFloat16>& grad_out)
      : p_(operands),
        grad_out_(grad_out),
        keys_(amx_pack<PackSlot<0>>(p_.k, p_.batch, p_.kv_heads, p_.tk, p_.dk, AmxLayout::ColumnPanels)),
        values_(amx_pack<PackSlot<1>>(p_.v, p_.batch, p_.kv_heads, p_.tk, p_.dv, AmxLayout::ColumnPanels)),
        key_pairs_(amx_pack<PackSlot<2>>(p_.k, p_.batch, p_.kv_heads, p_.tk, p_.dk, AmxLayout::RowPairs)),
        query_pairs_(amx_pack<PackSlot<3>>(p_.q, p_.batch, p_.heads, p_.tq, p_.dk, AmxLayout::RowPairs)),
        grad_out_pairs_(amx_pack<PackSlot<4>>(grad_out_, p_.batch, p_.heads, p_.tq, p_.dv, AmxLayout::RowPairs)) {}

  void key_block(Scratch&, const TileAt&, bool /*keys_finite*/) const {}

  /// S = scale · Q·Kᵀ.
  void scores(Scratch& st, const TileAt& t, float* s, int64_t lds, float* /*lane_max*/) const {
    unscaled_scores(st, t, s, lds);
    for (int64_t r = 0; r < t.rows; ++r) AmxForwardProducts::scale_row(s + r * lds, t.cols, p_.scale);
  }
  /// S = Q·Kᵀ, for a tile whose exp applies the scale (flash/plan.h's UnscaledScores).
  void unscaled_scores(Scratch& st, const TileAt& t, float* s, int64_t lds) const {
    st.rounded_by_grad_scores = false;  // a new tile
    const auto q = st.query.of(p_.q, p_.dk, t.b, t.h, t.i, t.rows);
    const uint32_t* keys = amx_panels_at(keys_, p_.k, t.b, t.hk, t.j, t.cols, p_.dk, st.keys);
    amx_multiply_panels(q.first, q.second, t.rows, amx_pair_blocks(p_.dk), keys, amx_panels(t.cols), s, lds);
  }
  /// P = exp(scale · s - lse) in place, to bfloat16's precision: every product P feeds rounds to bfloat16 (flash/
  /// plan.h's OwnProbabilities).
  static void probabilities(float* row, int64_t cols, float lse, float scale) {
    exp_to_bfloat16_precision(row, cols, scale, lse);
  }
  /// dV += Pᵀ·dO (Pᵀ rounded from `p`, unless grad_scores() rounded it).
  void add_grad_values(Scratch& st, const TileAt& t, const float* p, int64_t ldp, float* dv, int64_t lddv) const {
    const int64_t ld = st.rounded_by_grad_scores ? t.rows : transposed(p, ldp, t, 1.0f, st.probs_t);
    const AmxRowPairs dout =
        amx_row_pairs_at(grad_out_pairs_, grad_out_, t.b, t.h, t.i, t.rows, p_.dv, p_.tq, st.grad_out_pairs);
    amx_multiply_add(st.probs_t.data(), ld, t.cols, dout, p_.dv, dv, lddv);
  }
  /// dP = dO·Vᵀ.
  void grad_probs(Scratch& st, const TileAt& t, float* dp, int64_t lddp) const {
    const auto dout = st.grad_out.of(grad_out_, p_.dv, t.b, t.h, t.i, t.rows);
    const uint32_t* values = amx_panels_at(values_, p_.v, t.b, t.hk, t.j, t.cols, p_.dv, st.values);
    amx_multiply_panels(dout.first, dout.second, t.rows, amx_pair_blocks(p_.dv), values, amx_panels(t.cols), dp, lddp);
  }
  /// dS = P ⊙ (dP - delta) rounded with the scale of dK and dQ straight into their products' operands, and Pᵀ
  /// rounded for dV's in the same pass (flash/plan.h's OwnGradScores), for a tile of whole 32-row chunks and
  /// 16-key groups, which need no padding; false for any other.
  bool grad_scores(Scratch& st, const TileAt& t, const float* p, const float* dp, int64_t ld,
                   const float* delta) const {
    if (t.rows % kAmxKeyChunk != 0 || t.cols % kAmxPanel != 0) return false;
    const int64_t k = amx_chunks(t.cols) * kAmxKeyChunk;
    st.grad_scores.resize(t.rows * k);
    st.grad_scores_t.resize(t.cols * t.rows);
    st.probs_t.resize(t.cols * t.rows);
    BFloat16* by_rows = st.grad_scores.data();
    softmax_backward_round(p, dp, ld, t.rows, t.cols, delta, p_.scale, by_rows, k, st.grad_scores_t.data(), t.rows,
                           st.probs_t.data());
    if (k > t.cols) {
      for (int64_t r = 0; r < t.rows; ++r) std::fill(by_rows + r * k + t.cols, by_rows + (r + 1) * k, BFloat16(0.0f));
    }
    st.rounded_by_grad_scores = true;
    return true;
  }
  /// dK += scale · dSᵀ·Q, the scale in the rounding of dS (from `ds`, unless grad_scores() rounded it).
  void add_grad_keys(Scratch& st, const TileAt& t, const float* ds, int64_t ldds, float* dk, int64_t lddk) const {
    const int64_t ld = st.rounded_by_grad_scores ? t.rows : transposed(ds, ldds, t, p_.scale, st.grad_scores_t);
    const AmxRowPairs q = amx_row_pairs_at(query_pairs_, p_.q, t.b, t.h, t.i, t.rows, p_.dk, p_.tq, st.query_pairs);
    amx_multiply_add(st.grad_scores_t.data(), ld, t.cols, q, p_.dk, dk, lddk);
  }
  /// dQ += scale · dS·K, the scale in the rounding of dS (from `ds`, unless grad_scores() rounded it); only where
  /// the block's keys are finite.
  void add_grad_queries(Scratch& st, const TileAt& t, const float* ds, int64_t ldds, float* dq, int64_t lddq) const {
    const int64_t k = amx_chunks(t.cols) * kAmxKeyChunk;
    if (!st.rounded_by_grad_scores) {
      const int64_t rows = (t.rows + 15) / 16 * 16;
      st.grad_scores.resize(rows * k);
      BFloat16* rounded = st.grad_scores.data();
      for (int64_t r = 0; r < t.rows; ++r) {
        round_to_bfloat16(ds + r * ldds, t.cols, rounded + r * k, p_.scale);
        std::fill(rounded + r * k + t.cols, rounded + (r + 1) * k, BFloat16(0.0f));
      }
      std::fill(rounded + t.rows * k, rounded + rows * k, BFloat16(0.0f));
    }
    const BFloat16* rounded = st.grad_scores.data();
    const AmxRowPairs keys = amx_row_pairs_at(key_pairs_, p_.k, t.b, t.hk, t.j, t.cols, p_.dk, p_.tk, st.key_pairs);
    amx_multiply_add(rounded, k, t.rows, keys, p_.dk, dq, lddq);
  }

 private:
  /// The tile's [rows, cols] float block x (P or dS) times `scale`, transposed and rounded into `out`: the
  /// row-major left operand of Pᵀ·dO or dSᵀ·Q, a row per key, zero past the tile's query rows (to whole chunks)
  /// and past its keys (to whole tiles). Returns its row length.
  static int64_t transposed(const float* x, int64_t ldx, const TileAt& t, float scale,
                            CacheLineVector<BFloat16>& out) {
    const int64_t ld = amx_chunks(t.rows) * kAmxKeyChunk;
    const int64_t rows = (t.cols + 15) / 16 * 16;
    out.resize(rows * ld);
    transpose_round_to_bfloat16(x, ldx, t.rows, t.cols, out.data(), ld, scale);
    if (t.rows < ld) {
      for (int64_t j = 0; j < t.cols; ++j) std::fill(out.data() + j * ld + t.rows, out.data() + (j + 1) * ld, BFloat16(0.0f));
    }
    std::fill(out.data() + t.cols * ld, out.data() + rows * ld, BFloat16(0.0f));
    return ld;
  }

  const TileOperands<float, BFloat16>& p_;
  View4<const BFloat16> grad_out_;
  AmxPacked keys_, values_, key_pairs_, query_pairs_, grad_out_pairs_;
};

}  // namespace attn::ops::cpu::ATTN_KERNEL_NAMESPACE
