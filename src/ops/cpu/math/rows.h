#pragma once
// The row operations the kernels' softmax passes share, vectorised with at::vec and compiled once per
// instruction set (CPU_CAPABILITY_*) with the kernel that includes them.

#include "ops/cpu/math/vec_exp.h"

#include <ATen/cpu/vec/functional.h>
#include <ATen/cpu/vec/vec.h>
#include <c10/util/BFloat16.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>

namespace attn::ops::cpu::ATTN_KERNEL_NAMESPACE {

using at::vec::Vectorized;

template <typename T>
constexpr T kNegInf = -std::numeric_limits<T>::infinity();

/// max(x[0..n)), NaN if any element is NaN.
template <typename T>
T row_max(const T* x, int64_t n) {
  using Vec = Vectorized<T>;
  T result = kNegInf<T>;
  int64_t j = 0;
  if (n >= Vec::size()) {
    Vec acc(kNegInf<T>);
    for (; j + Vec::size() <= n; j += Vec::size()) acc = at::vec::maximum(acc, Vec::loadu(x + j));
    result = at::vec::vec_reduce_all<T>([](Vec a, Vec b) { return at::vec::maximum(a, b); }, acc);
  }
  for (; j < n; ++j) {
    if (std::isnan(x[j])) return x[j];
    result = std::max(result, x[j]);
  }
  return result;
}

/// x = exp(x - shift) in place; returns the sum.
template <typename T>
T exp_shifted_sum(T* x, int64_t n, T shift) {
  using Vec = Vectorized<T>;
  const Vec vshift(shift);
  Vec acc(T(0));
  int64_t j = 0;
  for (; j + Vec::size() <= n; j += Vec::size()) {
    const Vec e = fast_exp(Vec::loadu(x + j) - vshift);
    e.store(x + j);
    acc = acc + e;
  }
  T sum = at::vec::vec_reduce_all<T>(std::plus<Vec>(), acc);
  for (; j < n; ++j) {
    x[j] = std::exp(x[j] - shift);
    sum += x[j];
  }
  return sum;
}

/// x = exp(scale · x - shift) in place, scale · x - shift rounded once (with scale 1, exactly x - shift): scale
/// folds the softmax scale in where the scores were left unscaled.
template <typename T>
void exp_shifted(T* x, int64_t n, T shift, T scale = T(1)) {
  using Vec = Vectorized<T>;
  const Vec vscale(scale), vneg_shift(-shift);
  int64_t j = 0;
  for (; j + Vec::size() <= n; j += Vec::size()) {
    fast_exp(at::vec::fmadd(Vec::loadu(x + j), vscale, vneg_shift)).store(x + j);
  }
  for (; j < n; ++j) x[j] = std::exp(std::fma(x[j], scale, -shift));
}

/// ds = p · (dp - delta), and exactly 0 where p is 0: a blocked key contributes no gradient even where dp is
/// NaN or Inf (a non-finite value at a masked key).
template <typename T>
void softmax_backward_row(const T* p, T* dp, int64_t n, T delta) {
  using Vec = Vectorized<T>;
  const Vec vdelta(delta), zero(T(0));
  int64_t j = 0;
  for (; j + Vec::size() <= n; j += Vec::size()) {
    const Vec pv = Vec::loadu(p + j);
    const Vec ds = pv * (Vec::loadu(dp + j) - vdelta);
    Vec::blendv(ds, zero, pv == zero).store(dp + j);
  }
  for (; j < n; ++j) dp[j] = p[j] == T(0) ? T(0) : p[j] * (dp[j] - delta);
}

/// Whether every element of the [rows, cols] matrix x (row stride ld) is finite.
template <typename T>
bool all_finite(const T* x, int64_t rows, int64_t cols, int64_t ld) {
  using Vec = Vectorized<T>;
  const Vec zero(T(0));
  Vec acc(T(0));
  T tail = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const T* row = x + r * ld;
    int64_t c = 0;
    for (; c + Vec::size() <= cols; c += Vec::size()) acc = acc + Vec::loadu(row + c) * zero;
    for (; c < cols; ++c) tail += row[c] * T(0);
  }
  // x · 0 is 0 for finite x and NaN for NaN or ±Inf.
  return !std::isnan(at::vec::vec_reduce_all<T>(std::plus<Vec>(), acc) + tail);
}

/// The same for bfloat16: an all-ones exponent is Inf or NaN. (e & 0x7F80) + 0x80 carries into bit 15 exactly
/// for that exponent, so one OR per element, which the compiler vectorises, finds any of them.
inline bool all_finite(const c10::BFloat16* x, int64_t rows, int64_t cols, int64_t ld) {
  uint16_t carries = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const c10::BFloat16* row = x + r * ld;
    for (int64_t c = 0; c < cols; ++c) carries |= static_cast<uint16_t>((row[c].x & 0x7F80) + 0x0080);
  }
  return (carries & 0x8000) == 0;
}

}  // namespace attn::ops::cpu::ATTN_KERNEL_NAMESPACE
