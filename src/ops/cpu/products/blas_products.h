#pragma once
// The BLAS route: each tile product is one GEMM through the BLAS that LibTorch runs on (products/blas.h), its
// operands read where they lie. It serves float64, the portable and AVX2 variants, and float32 under
// ATTN_FLOAT_PRODUCTS=blas. The members are the route's part of the passes (products/flash_products.h says
// what each computes).

#include "ops/cpu/math/kernel_layout.h"
#include "ops/cpu/products/blas.h"
#include "ops/cpu/products/operands.h"
#include "ops/cpu/products/probabilities.h"

#include <algorithm>
#include <cstdint>

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

template <typename T>
class BlasProducts : public ProbabilitiesInTile<T> {
 public:
  struct Scratch {};
  static constexpr bool kRowMaxima = false;

  explicit BlasProducts(const TileOperands<T>& operands) : p_(operands) {}
  BlasProducts(const TileOperands<T>& operands, const View4<const T>& grad_out) : p_(operands), grad_out_(grad_out) {}

  void scores(Scratch&, const TileAt& t, T* s, int64_t lds, float* /*lane_max*/) const {
    gemm<T>(false, true, t.rows, t.cols, p_.dk, p_.scale, q(t), p_.q.si, k(t), p_.k.si, T(0), s, lds);
  }
  void add_values(Scratch&, const TileAt& t, const T* p, int64_t ldp, T* acc, int64_t ldacc) const {
    gemm<T>(false, false, t.rows, p_.dv, t.cols, T(1), p, ldp, v(t), p_.v.si, T(1), acc, ldacc);
  }

  void key_block(Scratch&, const TileAt&, bool /*keys_finite*/) const {}
  void add_grad_values(Scratch&, const TileAt& t, const T* p, int64_t ldp, T* dv, int64_t lddv) const {
    gemm<T>(true, false, t.cols, p_.dv, t.rows, T(1), p, ldp, dout(t), grad_out_.si, T(1), dv, lddv);
  }
  void grad_probs(Scratch&, const TileAt& t, T* dp, int64_t lddp) const {
    gemm<T>(false, true, t.rows, t.cols, p_.dv, T(1), dout(t), grad_out_.si, v(t), p_.v.si, T(0), dp, lddp);
  }
  void add_grad_keys(Scratch&, const TileAt& t, const T* ds, int64_t ldds, T* dk, int64_t lddk) const {
    gemm<T>(true, false, t.cols, p_.dk, t.rows, p_.scale, ds, ldds, q(t), p_.q.si, T(1), dk, lddk);
  }
  void add_grad_queries(Scratch&, const TileAt& t, const T* ds, int64_t ldds, T* dq, int64_t lddq) const {
    gemm<T>(false, false, t.rows, p_.dk, t.cols, p_.scale, ds, ldds, k(t), p_.k.si, T(1), dq, lddq);
  }

 private:
  const T* q(const TileAt& t) const { return p_.q.row(t.b, t.h, t.i); }
  const T* k(const TileAt& t) const { return p_.k.row(t.b, t.hk, t.j); }
  const T* v(const TileAt& t) const { return p_.v.row(t.b, t.hk, t.j); }
  const T* dout(const TileAt& t) const { return grad_out_.row(t.b, t.h, t.i); }

  const TileOperands<T>& p_;
  View4<const T> grad_out_;
};

}  // namespace attn::ops::cpu::ATTN_KERNEL_NAMESPACE
