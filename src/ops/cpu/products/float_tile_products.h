#pragma once
// The float-tile route: float32 tile products on attn's own AVX-512 register tiles (products/float_tiles.h).
// Kᵀ and Vᵀ are packed once per call and kv head, in panels of 64 keys (in the calling thread's kept buffers,
// products/kept_buffer.h, where they fit); every other operand (Q, K, V, dO, and
// Pᵀ and dSᵀ read transposed) is read where it lies, and Q·Kᵀ's epilogue gives the softmax its row maxima.
// AVX-512 variant only.

#include "ops/cpu/math/kernel_layout.h"
#include "ops/cpu/products/operands.h"
#include "ops/cpu/products/float_tiles.h"
#include "ops/cpu/products/kept_buffer.h"
#include "ops/cpu/products/probabilities.h"
#include "ops/cpu/products/uninitialised.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <cstdint>

namespace attn::ops::cpu::ATTN_KERNEL_NAMESPACE {

class FloatTileProducts : public ProbabilitiesInTile<float> {
 public:
  struct Scratch {};
  static constexpr bool kRowMaxima = true;

  explicit FloatTileProducts(const TileOperands<float>& operands)
      : p_(operands), keys_t_(transposed<PackSlot<0>>(p_.k, p_.batch, p_.kv_heads, p_.tk, p_.dk)) {}
  FloatTileProducts(const TileOperands<float>& operands, const View4<const float>& grad_out)
      : p_(operands),
        grad_out_(grad_out),
        keys_t_(transposed<PackSlot<0>>(p_.k, p_.batch, p_.kv_heads, p_.tk, p_.dk)),
        values_t_(transposed<PackSlot<1>>(p_.v, p_.batch, p_.kv_heads, p_.tk, p_.dv)) {}

  void scores(Scratch&, const TileAt& t, float* s, int64_t lds, float* lane_max) const {
    float_tiles::gemm(t.rows, t.cols, p_.dk, p_.scale, {q(t), p_.q.si, 1}, keys_t_.at(t), 0.0f, s, lds, lane_max);
  }
  void add_values(Scratch&, const TileAt& t, const float* p, int64_t ldp, float* acc, int64_t ldacc) const {
    float_tiles::gemm(t.rows, p_.dv, t.cols, 1.0f, {p, ldp, 1}, {v(t), p_.v.si}, 1.0f, acc, ldacc, nullptr);
  }

  void key_block(Scratch&, const TileAt&, bool /*keys_finite*/) const {}
  void add_grad_values(Scratch&, const TileAt& t, const float* p, int64_t ldp, float* dv, int64_t lddv) const {
    float_tiles::gemm(t.cols, p_.dv, t.rows, 1.0f, {p, 1, ldp}, {dout(t), grad_out_.si}, 1.0f, dv, lddv, nullptr);
  }
  void grad_probs(Scratch&, const TileAt& t, float* dp, int64_t lddp) const {
    float_tiles::gemm(t.rows, t.cols, p_.dv, 1.0f, {dout(t), grad_out_.si, 1}, values_t_.at(t), 0.0f, dp, lddp,
                      nullptr);
  }
  void add_grad_keys(Scratch&, const TileAt& t, const float* ds, int64_t ldds, float* dk, int64_t lddk) const {
    float_tiles::gemm(t.cols, p_.dk, t.rows, p_.scale, {ds, 1, ldds}, {q(t), p_.q.si}, 1.0f, dk, lddk, nullptr);
  }
  void add_grad_queries(Scratch&, const TileAt& t, const float* ds, int64_t ldds, float* dq, int64_t lddq) const {
    float_tiles::gemm(t.rows, p_.dk, t.cols, p_.scale, {ds, ldds, 1}, {k(t), p_.k.si}, 1.0f, dq, lddq, nullptr);
  }

 private:
  /// Kᵀ (or Vᵀ) of every (batch row, kv head), read by every tile of its head's query heads: [width, 64] for
  /// each 64 keys, so that a tile's panel of Kᵀ is in one piece (16 KiB at d = 64) rather than 64 rows a whole
  /// sequence apart (bench/RESULTS.md, "Kᵀ in panels, and a shorter exp"). A packed sequence's tiles start
  /// inside a panel; the products take that partial panel first.
  struct Transposed {
    static constexpr int64_t kKeys = register_tile::kPanel;
    Uninitialised<float> own;  // where the pack is too large for the calling thread's kept buffer
    float* data = nullptr;
    int64_t width = 0, heads = 0, head_size = 0;
    /// The tile's keys, as the right operand.
    register_tile::Panels<float> at(const TileAt& t) const {
      return {data + (t.b * heads + t.hk) * head_size + t.j / kKeys * kKeys * width, kKeys, t.j % kKeys,
              kKeys * width};
    }
  };

  template <typename Slot>
  static Transposed transposed(const View4<const float>& x, int64_t batch, int64_t heads, int64_t rows,
                               int64_t width) {
    Transposed out;
    out.width = width;
    out.heads = heads;
    const int64_t panels = (rows + Transposed::kKeys - 1) / Transposed::kKeys;
    out.head_size = panels * Transposed::kKeys * width;
    out.data = kept_buffer<Slot>(batch * heads * out.head_size, kKeptPackBytes, out.own);
    if (rows == 0) return out;
    at::parallel_for(0, batch * heads * panels, 1, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        const int64_t bh = i / panels, j = (i % panels) * Transposed::kKeys;
        float_tiles::pack_transposed(x.row(bh / heads, bh % heads, j), x.si, std::min(Transposed::kKeys, rows - j),
                                     width, out.data + bh * out.head_size + j * width, Transposed::kKeys);
      }
    });
    return out;
  }

  const float* q(const TileAt& t) const { return p_.q.row(t.b, t.h, t.i); }
  const float* k(const TileAt& t) const { return p_.k.row(t.b, t.hk, t.j); }
  const float* v(const TileAt& t) const { return p_.v.row(t.b, t.hk, t.j); }
  const float* dout(const TileAt& t) const { return grad_out_.row(t.b, t.h, t.i); }

  const TileOperands<float>& p_;
  View4<const float> grad_out_;
  Transposed keys_t_, values_t_;
};

}  // namespace attn::ops::cpu::ATTN_KERNEL_NAMESPACE
