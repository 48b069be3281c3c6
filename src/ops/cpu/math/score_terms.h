#pragma once
// The score terms the fused kernels apply to a tile after S = scale·Q·Kᵀ and before the masks, in the order
// backends/masks.h states: soft-capping, then the ALiBi bias. Vectorised; compiled once per instruction set
// with the kernel that includes it.

#include <ATen/cpu/vec/vec.h>

#include <cmath>
#include <cstdint>

namespace attn::ops::cpu::ATTN_KERNEL_NAMESPACE {

/// 1 / x: the hardware's approximate reciprocal refined by one Newton step (about 2^-23 relative error, like a
/// division), at a fraction of a division's cost. x is a normal float (here in [1, 330]).
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

namespace tanh_constants {
// tanh(x) = x · P(x²) / Q(x²) on |x| <= kClamp: a minimax rational fit of ours (differential correction on
// relative error, float64), 8e-8 relative error before float rounding, under 4e-7 (6 ulp) evaluated in float.
// Past kClamp, tanh(x) is within 3e-8 of ±1. The soft-capped score is then off by at most cap · 4e-7, a few
// ulp of a score whose own Q·Kᵀ sum already carries rounding of that order.
constexpr float kClamp = 9.0f;
constexpr float kP0 = 0.99999994f, kP1 = 0.12928694f, kP2 = 2.9305294e-3f, kP3 = 9.3482995e-6f,
                kP4 = -1.2992021e-8f, kP5 = 1.8720150e-11f;
constexpr float kQ1 = 0.46262005f, kQ2 = 2.3804275e-2f, kQ3 = 2.2939449e-4f;
}  // namespace tanh_constants

#if defined(CPU_CAPABILITY_AVX512) || defined(CPU_CAPABILITY_AVX2)
/// x clamped to [-bound, bound], NaN kept (min and max return their second operand when one is NaN).
inline at::vec::Vectorized<float> clamp_keeping_nan(const at::vec::Vectorized<float>& x, float bound) {
#if defined(CPU_CAPABILITY_AVX512)
  return _mm512_max_ps(_mm512_set1_ps(-bound), _mm512_min_ps(_mm512_set1_ps(bound), x));
#else
  return _mm256_max_ps(_mm256_set1_ps(-bound), _mm256_min_ps(_mm256_set1_ps(bound), x));
#endif
}

/// tanh(y) as a rational function: about 19 vector operations, half of what an exp-based tanh costs (the
/// soft-cap runs one per score). ±Inf gives ±1; NaN stays NaN. The result is clamped to [-1, 1]: near |y| = 9
/// the rounded quotient can reach 1 + 2^-22, and the backward pass's 1 - tanh² must not turn negative.
inline at::vec::Vectorized<float> fast_tanh(const at::vec::Vectorized<float>& y) {
  using Vec = at::vec::Vectorized<float>;
  using namespace tanh_constants;
  const Vec x = clamp_keeping_nan(y, kClamp);
  const Vec u = x * x;
  Vec p = at::vec::fmadd(Vec(kP5), u, Vec(kP4));
  p = at::vec::fmadd(p, u, Vec(kP3));
  p = at::vec::fmadd(p, u, Vec(kP2));
  p = at::vec::fmadd(p, u, Vec(kP1));
  p = at::vec::fmadd(p, u, Vec(kP0));
  Vec q = at::vec::fmadd(Vec(kQ3), u, Vec(kQ2));
  q = at::vec::fmadd(q, u, Vec(kQ1));
  q = at::vec::fmadd(q, u, Vec(1.0f));
  return clamp_keeping_nan((x * p) * reciprocal(q), 1.0f);
}
#else
/// The portable variant: at::vec's tanh (std::tanh per element).
inline at::vec::Vectorized<float> fast_tanh(const at::vec::Vectorized<float>& y) { return y.tanh(); }
#endif
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
