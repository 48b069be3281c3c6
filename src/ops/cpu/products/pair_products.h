#pragma once
// The bfloat16 pairs route: every tile product on AVX512-BF16's pair product (products/bf16_pairs.h), with float
// accumulation. P and dS are rounded to bfloat16 for the products they feed, as FlashAttention's bfloat16 kernels
// do; the softmax, its backward and every accumulator stay in float. The right operands (Kᵀ and V forward; Kᵀ,
// Vᵀ, and K, Q and dO in pairs of rows backward) are packed once per call and read by every tile. AVX-512
// variant, on a CPU with AVX512-BF16 only. (AMX's tiles have a route of their own: products/amx_products.h.)

#include "ops/cpu/math/kernel_layout.h"
#include "ops/cpu/math/rows.h"
#include "ops/cpu/products/bf16_pairs.h"
#include "ops/cpu/products/bf16_softmax.h"
#include "ops/cpu/products/cache_line_vector.h"
#include "ops/cpu/products/operands.h"
#include "ops/cpu/products/uninitialised.h"

#include <ATen/Parallel.h>
#include <c10/util/BFloat16.h>

#include <algorithm>
#include <cstdint>
#include <vector>

namespace attn::ops::cpu::ATTN_KERNEL_NAMESPACE {

class PairProducts {
 public:
  using BFloat16 = c10::BFloat16;

  /// A task's own buffers: the rounded left operands, and the pairs of rows a tile cannot take from the packed
  /// heads (an odd start or count).
  struct Scratch {
    CacheLineVector<BFloat16> probs;       // forward: P rounded, probs_ld a row
    int64_t probs_ld = 0;
    CacheLineVector<uint32_t> value_pairs;  // forward: the tile's V in pairs of rows
    CacheLineVector<BFloat16> probs_t, grad_scores_t;  // backward: Pᵀ and dSᵀ rounded, row-major left operands
    CacheLineVector<BFloat16> grad_scores;             // backward: dS rounded, a row as long as dS's plus 2
    CacheLineVector<uint32_t> query_pairs, grad_out_pairs, key_pairs;
    const uint32_t* key_block_pairs = nullptr;  // backward: the key block's K in pairs of rows (key_block)
  };
  static constexpr bool kRowMaxima = true;

  explicit PairProducts(const TileOperands<float, BFloat16>& operands) : p_(operands) {
    keys_t_ = transposed_in_pairs(p_.k, p_.batch, p_.kv_heads, p_.tk, p_.dk);
    value_rows_ = rows_in_pairs(p_.v, p_.batch, p_.kv_heads, p_.tk, p_.dv);
  }
  PairProducts(const TileOperands<float, BFloat16>& operands, const View4<const BFloat16>& grad_out)
      : p_(operands), grad_out_(grad_out) {
    keys_t_ = transposed_in_pairs(p_.k, p_.batch, p_.kv_heads, p_.tk, p_.dk);
    values_t_ = transposed_in_pairs(p_.v, p_.batch, p_.kv_heads, p_.tk, p_.dv);
    key_rows_ = rows_in_pairs(p_.k, p_.batch, p_.kv_heads, p_.tk, p_.dk);
    query_rows_ = rows_in_pairs(p_.q, p_.batch, p_.heads, p_.tq, p_.dk);
    grad_out_rows_ = rows_in_pairs(grad_out_, p_.batch, p_.heads, p_.tq, p_.dv);
  }

  /// Also sizes the rounded P of the tile's rows (exp_sum writes it): a row as long as S's, plus the zero pad
  /// element of an odd count and one more to keep pairs aligned.
  void scores(Scratch& st, const TileAt& t, float* s, int64_t lds, float* lane_max) const {
    st.probs_ld = lds + 2;
    if (static_cast<int64_t>(st.probs.size()) < t.rows * st.probs_ld) st.probs.resize(t.rows * st.probs_ld);
    bf16_gemm(t.rows, t.cols, keys_t_.pairs, p_.scale, LeftOperand{q(t), p_.q.si, 2},
              PairsOperand{keys_t_.of(t.b, t.hk) + t.j, keys_t_.ld}, 0.0f, s, lds, lane_max);
  }
  /// P goes straight to bfloat16 for P·V; the float P stays in the row only where the values' fallback (a
  /// non-finite value in the tile) needs it.
  float exp_sum(Scratch& st, int64_t r, float* row, int64_t cols, float max, bool values_finite) const {
    if (!values_finite) return exp_shifted_sum(row, cols, max);
    return exp_round_sum(row, cols, 1.0f, max, st.probs.data() + r * st.probs_ld, cols + cols % 2);
  }
  void no_keys_yet(Scratch& st, int64_t r, float* row, int64_t cols) const {
    std::fill(row, row + cols, 0.0f);
    std::fill_n(st.probs.data() + r * st.probs_ld, cols + 1, BFloat16(0.0f));
  }
  /// acc += P·V with the rounded P (exp_sum), not `p`.
  void add_values(Scratch& st, const TileAt& t, const float* /*p*/, int64_t /*ldp*/, float* acc,
                  int64_t ldacc) const {
    const uint32_t* v_pairs = pairs_of_rows(value_rows_, p_.v, t.b, t.hk, t.j, t.cols, p_.dv, st.value_pairs);
    bf16_gemm(t.rows, p_.dv, (t.cols + 1) / 2, 1.0f, LeftOperand{st.probs.data(), st.probs_ld, 2},
              PairsOperand{v_pairs, value_rows_.ld}, 1.0f, acc, ldacc);
  }

  /// The key block's K in pairs of rows for dS·K, where its keys are all finite (otherwise dQ takes the
  /// loop's fallback).
  void key_block(Scratch& st, const TileAt& t, bool keys_finite) const {
    st.key_block_pairs =
        keys_finite ? pairs_of_rows(key_rows_, p_.k, t.b, t.hk, t.j, t.cols, p_.dk, st.key_pairs) : nullptr;
  }
  void add_grad_values(Scratch& st, const TileAt& t, const float* p, int64_t ldp, float* dv, int64_t lddv) const {
    const LeftOperand probs_t = transposed_left(p, ldp, t, st.probs_t);
    const uint32_t* dout_pairs =
        pairs_of_rows(grad_out_rows_, grad_out_, t.b, t.h, t.i, t.rows, p_.dv, st.grad_out_pairs);
    bf16_gemm(t.cols, p_.dv, (t.rows + 1) / 2, 1.0f, probs_t, PairsOperand{dout_pairs, grad_out_rows_.ld}, 1.0f,
                   dv, lddv);
  }
  void grad_probs(Scratch&, const TileAt& t, float* dp, int64_t lddp) const {
    bf16_gemm(t.rows, t.cols, values_t_.pairs, 1.0f, LeftOperand{dout(t), grad_out_.si, 2},
              PairsOperand{values_t_.of(t.b, t.hk) + t.j, values_t_.ld}, 0.0f, dp, lddp);
  }
  void add_grad_keys(Scratch& st, const TileAt& t, const float* ds, int64_t ldds, float* dk, int64_t lddk) const {
    const LeftOperand grad_scores_t = transposed_left(ds, ldds, t, st.grad_scores_t);
    const uint32_t* q_pairs = pairs_of_rows(query_rows_, p_.q, t.b, t.h, t.i, t.rows, p_.dk, st.query_pairs);
    bf16_gemm(t.cols, p_.dk, (t.rows + 1) / 2, p_.scale, grad_scores_t, PairsOperand{q_pairs, query_rows_.ld},
                   1.0f, dk, lddk);
  }
  /// dQ += scale · dS·K with dS rounded; only after key_block() found the block's keys finite.
  void add_grad_queries(Scratch& st, const TileAt& t, const float* ds, int64_t ldds, float* dq, int64_t lddq) const {
    const int64_t ld = ldds + 2;  // the zero pad element of an odd count, and pairs kept aligned
    st.grad_scores.resize(t.rows * ld);
    BFloat16* rounded = st.grad_scores.data();
    for (int64_t r = 0; r < t.rows; ++r) round_to_bfloat16(ds + r * ldds, t.cols, rounded + r * ld);
    bf16_gemm(t.rows, p_.dk, (t.cols + 1) / 2, p_.scale, LeftOperand{rounded, ld, 2},
              PairsOperand{st.key_block_pairs, key_rows_.ld}, 1.0f, dq, lddq);
  }

 private:
  /// Right operands packed once per call: for each of `heads` heads of every batch row (h = b · heads + head),
  /// either the transpose of its [rows, width] matrix in pairs layout (Kᵀ for Q·Kᵀ, Vᵀ for dO·Vᵀ: pairs along
  /// width, a column per row) or the matrix itself in pairs of rows (V for P·V, K for dS·K, Q and dO for the
  /// backward pass's transposed products: a column per element of width).
  struct PackedPairs {
    Uninitialised<uint32_t> data;
    int64_t ld = 0, pairs = 0, heads = 0;
    const uint32_t* of(int64_t b, int64_t h) const { return data.data() + (b * heads + h) * pairs * ld; }
    /// Pairs of rows from row g on (g even).
    const uint32_t* from(int64_t b, int64_t h, int64_t g) const { return of(b, h) + g / 2 * ld; }
  };

  static PackedPairs transposed_in_pairs(const View4<const BFloat16>& x, int64_t batch, int64_t heads, int64_t rows,
                                         int64_t width) {
    PackedPairs t;
    t.ld = pairs_row_length(rows);
    t.pairs = (width + 1) / 2;
    t.heads = heads;
    // kPairLanes words of slack: a panel that starts mid-row reads up to one vector past the last column (into
    // lanes that are never stored; zeros all the same).
    t.data.allocate(batch * heads * t.pairs * t.ld + kPairLanes);
    std::fill_n(t.data.data() + batch * heads * t.pairs * t.ld, kPairLanes, 0u);
    // No rows: nothing to pack, and the data pointer may be null (no row to address).
    if (rows == 0) return t;
    at::parallel_for(0, batch * heads, 1, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        pack_transposed_in_pairs(x.row(i / heads, i % heads, 0), x.si, rows, width,
                                 t.data.data() + i * t.pairs * t.ld, t.ld);
      }
    });
    return t;
  }

  static PackedPairs rows_in_pairs(const View4<const BFloat16>& x, int64_t batch, int64_t heads, int64_t rows,
                                   int64_t width) {
    PackedPairs t;
    t.ld = pairs_row_length(width);
    t.pairs = (rows + 1) / 2;
    t.heads = heads;
    t.data.allocate(batch * heads * t.pairs * t.ld);
    if (rows == 0) return t;
    at::parallel_for(0, batch * heads, 1, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        pack_rows_in_pairs(x.row(i / heads, i % heads, 0), x.si, rows, width, t.data.data() + i * t.pairs * t.ld,
                           t.ld);
      }
    });
    return t;
  }

  /// The pairs of rows [g0, g0 + n) of head (b, h) for a product: from the pack of the whole head where they
  /// start a pair there and end one; otherwise (an odd start in a packed batch, a window or a band, or an odd
  /// count, whose pad row must be 0 rather than the next row's value) packed into `scratch`.
  static const uint32_t* pairs_of_rows(const PackedPairs& packed, const View4<const BFloat16>& x, int64_t b,
                                       int64_t h, int64_t g0, int64_t n, int64_t width,
                                       CacheLineVector<uint32_t>& scratch) {
    if (g0 % 2 == 0 && n % 2 == 0) return packed.from(b, h, g0);
    scratch.resize((n + 1) / 2 * packed.ld);
    pack_rows_in_pairs(x.row(b, h, g0), x.si, n, width, scratch.data(), packed.ld);
    return scratch.data();
  }

  /// The tile's [rows, cols] float block x (P or dS) transposed and rounded into `scratch`: the row-major left
  /// operand of Pᵀ·dO or dSᵀ·Q, a row per key, its rows' pairs adjacent.
  static LeftOperand transposed_left(const float* x, int64_t ldx, const TileAt& t,
                                     CacheLineVector<BFloat16>& scratch) {
    const int64_t ld = (t.rows + 1) / 2 * 2;
    scratch.resize(t.cols * ld);
    transpose_round_to_bfloat16(x, ldx, t.rows, t.cols, scratch.data(), ld);
    return LeftOperand{scratch.data(), ld, 2};
  }

  const BFloat16* q(const TileAt& t) const { return p_.q.row(t.b, t.h, t.i); }
  const BFloat16* dout(const TileAt& t) const { return grad_out_.row(t.b, t.h, t.i); }

  const TileOperands<float, BFloat16>& p_;
  View4<const BFloat16> grad_out_;
  PackedPairs keys_t_, value_rows_, values_t_, key_rows_, query_rows_, grad_out_rows_;
};

}  // namespace attn::ops::cpu::ATTN_KERNEL_NAMESPACE
