#pragma once
// The BLAS route: each tile product is one GEMM through the BLAS that LibTorch runs on (products/blas.h), its
// operands read where they lie. It serves float64, the portable and AVX2 variants, and float32 under
// ATTN_FLOAT_PRODUCTS=blas. bfloat16 inputs (In) are widened to float as the tiles read them, into the task's
// scratch, each block once for the products that read it in turn: the forward's queries for all their tiles, its
// keys and values a tile at a time; the backward's keys and values for all the tiles of a key block, each tile's
// queries and dO for its two products. Widened whole before the call instead, Q, K and V took three fresh float
// copies a call, whose first touch cost more than the widening itself (bench/RESULTS.md). The members are the
// route's part of the passes (products/flash_products.h says what each computes).

#include "ops/cpu/math/kernel_layout.h"
#include "ops/cpu/products/blas.h"
#include "ops/cpu/products/operands.h"
#include "ops/cpu/products/probabilities.h"
#include "ops/cpu/products/row_tiles.h"

#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <vector>

namespace attn::ops::cpu::ATTN_KERNEL_NAMESPACE {

/// Row-major C[m, n] = alpha · op(A) · op(B) + beta · C through the BLAS that LibTorch uses. BLAS is
/// column-major, and a row-major matrix is its transpose in column-major, so the operands swap.
template <typename T>
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, T alpha, const T* a, int64_t lda,
          const T* b, int64_t ldb, T beta, T* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  if (k == 0) {  // an empty sum: BLAS implementations disagree on whether they touch C here
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) c[i * ldc + j] = beta == T(0) ? T(0) : beta * c[i * ldc + j];
    }
    return;
  }
  // BLAS rejects a leading dimension smaller than the row length, which a single-row view may carry.
  lda = std::max(lda, trans_a ? m : k);
  ldb = std::max(ldb, trans_b ? k : n);
  blas_gemm(trans_b, trans_a, n, m, k, alpha, b, ldb, a, lda, beta, c, ldc);
}

/// A block of rows of In, widened to T into a buffer of its own and kept while the next product reads the same
/// rows (the same first row and count, in one call's read-only inputs). Where In is T, the rows themselves.
template <typename T, typename In>
class WidenedRows {
 public:
  /// The `rows` rows of `width` elements at `src`, `stride` apart, as T; *ld is their row stride.
  const T* read(const In* src, int64_t rows, int64_t width, int64_t stride, int64_t* ld) {
    if constexpr (std::is_same_v<T, In>) {
      *ld = stride;
      return src;
    } else {
      *ld = width;
      if (src == source_ && rows == rows_ && width == width_) return data_.data();
      data_.resize(rows * width);
      for (int64_t r = 0; r < rows; ++r) widen(src + r * stride, width, data_.data() + r * width);
      source_ = src, rows_ = rows, width_ = width;
      return data_.data();
    }
  }

 private:
  static void widen(const In* src, int64_t n, T* dst) {
    using Vec = Vectorized<T>;
    int64_t i = 0;
    for (; i + 2 * Vec::size() <= n; i += 2 * Vec::size()) {
      Vec lo, hi;
      load_two<T>(src + i, lo, hi);
      lo.store(dst + i);
      hi.store(dst + i + Vec::size());
    }
    for (; i < n; ++i) dst[i] = static_cast<T>(src[i]);
  }

  std::vector<T> data_;
  const In* source_ = nullptr;
  int64_t rows_ = 0, width_ = 0;
};

/// In: T itself, or bfloat16 for T = float (widened as read).
template <typename T, typename In = T>
class BlasProducts : public ProbabilitiesInTile<T> {
 public:
  struct Scratch {
    WidenedRows<T, In> q, k, v, dout;
  };
  static constexpr bool kRowMaxima = false;

  explicit BlasProducts(const TileOperands<T, In>& operands) : p_(operands) {}
  BlasProducts(const TileOperands<T, In>& operands, const View4<const In>& grad_out)
      : p_(operands), grad_out_(grad_out) {}

  void scores(Scratch& st, const TileAt& t, T* s, int64_t lds, float* /*lane_max*/) const {
    int64_t ldq, ldk;
    const T* q = queries(st, t, &ldq);
    const T* k = keys(st, t, &ldk);
    gemm<T>(false, true, t.rows, t.cols, p_.dk, p_.scale, q, ldq, k, ldk, T(0), s, lds);
  }
  void add_values(Scratch& st, const TileAt& t, const T* p, int64_t ldp, T* acc, int64_t ldacc) const {
    int64_t ldv;
    const T* v = values(st, t, &ldv);
    gemm<T>(false, false, t.rows, p_.dv, t.cols, T(1), p, ldp, v, ldv, T(1), acc, ldacc);
  }

  void key_block(Scratch&, const TileAt&, bool /*keys_finite*/) const {}
  void add_grad_values(Scratch& st, const TileAt& t, const T* p, int64_t ldp, T* dv, int64_t lddv) const {
    int64_t ldo;
    const T* dout = grad_out(st, t, &ldo);
    gemm<T>(true, false, t.cols, p_.dv, t.rows, T(1), p, ldp, dout, ldo, T(1), dv, lddv);
  }
  void grad_probs(Scratch& st, const TileAt& t, T* dp, int64_t lddp) const {
    int64_t ldo, ldv;
    const T* dout = grad_out(st, t, &ldo);
    const T* v = values(st, t, &ldv);
    gemm<T>(false, true, t.rows, t.cols, p_.dv, T(1), dout, ldo, v, ldv, T(0), dp, lddp);
  }
  void add_grad_keys(Scratch& st, const TileAt& t, const T* ds, int64_t ldds, T* dk, int64_t lddk) const {
    int64_t ldq;
    const T* q = queries(st, t, &ldq);
    gemm<T>(true, false, t.cols, p_.dk, t.rows, p_.scale, ds, ldds, q, ldq, T(1), dk, lddk);
  }
  void add_grad_queries(Scratch& st, const TileAt& t, const T* ds, int64_t ldds, T* dq, int64_t lddq) const {
    int64_t ldk;
    const T* k = keys(st, t, &ldk);
    gemm<T>(false, false, t.rows, p_.dk, t.cols, p_.scale, ds, ldds, k, ldk, T(1), dq, lddq);
  }

 private:
  const T* queries(Scratch& st, const TileAt& t, int64_t* ld) const {
    return st.q.read(p_.q.row(t.b, t.h, t.i), t.rows, p_.dk, p_.q.si, ld);
  }
  const T* keys(Scratch& st, const TileAt& t, int64_t* ld) const {
    return st.k.read(p_.k.row(t.b, t.hk, t.j), t.cols, p_.dk, p_.k.si, ld);
  }
  const T* values(Scratch& st, const TileAt& t, int64_t* ld) const {
    return st.v.read(p_.v.row(t.b, t.hk, t.j), t.cols, p_.dv, p_.v.si, ld);
  }
  const T* grad_out(Scratch& st, const TileAt& t, int64_t* ld) const {
    return st.dout.read(grad_out_.row(t.b, t.h, t.i), t.rows, p_.dv, grad_out_.si, ld);
  }

  const TileOperands<T, In>& p_;
  View4<const In> grad_out_;
};

}  // namespace attn::ops::cpu::ATTN_KERNEL_NAMESPACE
