#pragma once
// The score terms the fused kernels apply to a tile after S = scale·Q·Kᵀ and before the masks, in the order
// backends/masks.h states: soft-capping, then the ALiBi bias. Vectorised; compiled once per instruction set
// with the kernel that includes it.

#include "ops/cpu/vec_exp.h"

#include <ATen/cpu/vec/vec.h>

#include <cmath>
#include <cstdint>

namespace attn::ops::cpu::ATTN_KERNEL_NAMESPACE {

/// 1 / x: the hardware's approximate reciprocal refined by one Newton step (about 2^-23 relative error, like a
/// division), at a fraction of a division's cost. x is in [1, 2] here.
inline at::vec::Vectorized<float> reciprocal(const at::vec::Vectorized<float>& x) {
#if defined(CPU_CAPABILITY_AVX512)
  const __m512 r = _mm512_rcp14_ps(x);
  return _mm512_mul_ps(r, _mm512_fnmadd_ps(x, r, _mm512_set1_ps(2.0f)));
#elif defined(CPU_CAPABILITY_AVX2)
  const __m256 r = _mm256_rcp_ps(x);
  return _mm256_mul_ps(r, _mm256_fnmadd_ps(x, r, _mm256_set1_ps(2.0f)));
#else
  return at::vec::Vectorized<float>(1.0f) / x;
#endif
}

/// tanh(y) = sign(y) · (1 - e) / (1 + e) with e = exp(-2|y|) in (0, 1]: the fast exp's accurate range, and no
/// overflow for any y. float64 and the portable variant use at::vec's tanh.
inline at::vec::Vectorized<float> fast_tanh(const at::vec::Vectorized<float>& y) {
  using Vec = at::vec::Vectorized<float>;
  const Vec e = fast_exp(Vec(-2.0f) * y.abs());
  const Vec t = (Vec(1.0f) - e) * reciprocal(Vec(1.0f) + e);
  return Vec::blendv(t, Vec(0.0f) - t, y < Vec(0.0f));
}
inline at::vec::Vectorized<double> fast_tanh(const at::vec::Vectorized<double>& y) { return y.tanh(); }

/// x = cap · tanh(x / cap) over n elements; when `tanh_out` is given, tanh(x / cap) is also stored there (the
/// backward pass's derivative factor 1 - tanh² comes from it). An infinite score becomes ±cap.
template <typename T>
void softcap_row(T* x, int64_t n, T cap, T* tanh_out) {
  using Vec = at::vec::Vectorized<T>;
  const Vec vcap(cap), vinv(T(1) / cap);
  int64_t j = 0;
  for (; j + Vec::size() <= n; j += Vec::size()) {
    const Vec t = fast_tanh(Vec::loadu(x + j) * vinv);
    if (tanh_out) t.store(tanh_out + j);
    (t * vcap).store(x + j);
  }
  for (; j < n; ++j) {
    const T t = std::tanh(x[j] / cap);
    if (tanh_out) tanh_out[j] = t;
    x[j] = cap * t;
  }
}

/// x[c] -= slope · |base - c| for c in [0, n): the ALiBi bias of one row, where base = i + offset - j0 is the
/// row's diagonal relative to the tile's first key.
template <typename T>
void alibi_row(T* x, int64_t n, T slope, int64_t base) {
  using Vec = at::vec::Vectorized<T>;
  const Vec vslope(slope);
  const Vec lanes = Vec::arange(T(0), T(1));
  int64_t j = 0;
  for (; j + Vec::size() <= n; j += Vec::size()) {
    const Vec distance = (Vec(static_cast<T>(base - j)) - lanes).abs();
    (Vec::loadu(x + j) - distance * vslope).store(x + j);
  }
  for (; j < n; ++j) x[j] -= slope * static_cast<T>(std::abs(base - j));
}

/// dS *= 1 - tanh² over n elements: the soft-cap's derivative, applied to the gradient of the capped scores.
/// Zeros stay exactly zero.
template <typename T>
void softcap_backward_row(T* ds, const T* tanh_values, int64_t n) {
  using Vec = at::vec::Vectorized<T>;
  const Vec one(T(1)), zero(T(0));
  int64_t j = 0;
  for (; j + Vec::size() <= n; j += Vec::size()) {
    const Vec t = Vec::loadu(tanh_values + j), d = Vec::loadu(ds + j);
    // A blocked pair keeps exactly 0, even where its (unused) score was NaN.
    Vec::blendv(d * (one - t * t), zero, d == zero).store(ds + j);
  }
  for (; j < n; ++j) {
    if (ds[j] != T(0)) ds[j] *= T(1) - tanh_values[j] * tanh_values[j];
  }
}

}  // namespace attn::ops::cpu::ATTN_KERNEL_NAMESPACE
