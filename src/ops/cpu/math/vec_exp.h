#pragma once
// exp() for the softmax tiles, faster than at::vec's (SLEEF's 1-ulp expf): a Cephes-style range reduction
// and degree-6 polynomial, within 2 ulp of expf over the range the kernels use (x <= 0). exp(-inf) is
// exactly 0, as the masks need; NaN stays NaN. float64 and the portable variant use at::vec's exp.
//
// Included by math/rows.h, so it is compiled once per instruction set (CPU_CAPABILITY_*).

#include <ATen/cpu/vec/vec.h>

#if defined(CPU_CAPABILITY_AVX512) || defined(CPU_CAPABILITY_AVX2)
#include <immintrin.h>
#endif

namespace attn::ops::cpu::ATTN_KERNEL_NAMESPACE {

namespace exp_constants {
// e^x = 2^n · e^r with n = round(x·log2 e) and r = x - n·ln 2, ln 2 split in two for an exact product.
constexpr float kLog2e = 1.44269504088896341f;
constexpr float kLn2Hi = 0.693359375f;
constexpr float kLn2Lo = -2.12194440e-4f;
// Below this, 2^n underflows: n = -127 gives an all-zero exponent field, i.e. exactly 0.
constexpr float kMin = -88.02969193f;
constexpr float kMax = 88.3762626647949f;
// Above 88.73, e^x overflows float. The AVX-512 variant clamps x here instead of at kMax: 2^n · e^r, n = 144,
// is still +inf, as it should be for every x past 88.73.
constexpr float kOverflowClamp = 100.0f;
// Below this, e^x (< 9e-27) is returned as exactly 0. Next to a softmax row sum >= 1 such a weight changes
// nothing a float sum can hold, but its products in the P·V GEMM underflow to subnormals, each ~100x slower
// (ALiBi's far keys land there by the thousand: +35% time before this, +4% after).
constexpr float kFlushBelow = -60.0f;
// Minimax coefficients for (e^r - 1 - r) / r² on |r| <= ln 2 / 2 (Cephes expf).
constexpr float kP0 = 1.9875691500e-4f, kP1 = 1.3981999507e-3f, kP2 = 8.3334519073e-3f, kP3 = 4.1665795894e-2f,
                kP4 = 1.6666665459e-1f, kP5 = 5.0000001201e-1f;
}  // namespace exp_constants

#if defined(CPU_CAPABILITY_AVX512)
inline at::vec::Vectorized<float> fast_exp(const at::vec::Vectorized<float>& vx) {
  using namespace exp_constants;
  const __m512 x = vx;
  // vmaxps/vminps return their second operand when either is NaN: x goes second, so NaN passes through every
  // step below (and vscalefps keeps it), NaN in, NaN out. From above, x is clamped to kOverflowClamp, past
  // float's range, so that the reduced argument stays small and vscalefps overflows to +inf (+inf included).
  const __m512 xc = _mm512_min_ps(_mm512_set1_ps(kOverflowClamp), _mm512_max_ps(_mm512_set1_ps(kMin), x));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(xc, _mm512_set1_ps(kLog2e)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(kLn2Hi), xc);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(kLn2Lo), r);
  __m512 y = _mm512_set1_ps(kP0);
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(kP1));
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(kP2));
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(kP3));
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(kP4));
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(kP5));
  y = _mm512_fmadd_ps(y, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  // y · 2^n in one instruction (the same product as building 2^n's bits and multiplying, for every n the
  // kept range reaches), and exactly 0 below kFlushBelow; NaN compares unordered and is kept.
  const __mmask16 keep = _mm512_cmp_ps_mask(x, _mm512_set1_ps(kFlushBelow), _CMP_NLT_UQ);
  return _mm512_maskz_scalef_ps(keep, y, n);
}
#elif defined(CPU_CAPABILITY_AVX2)
inline at::vec::Vectorized<float> fast_exp(const at::vec::Vectorized<float>& vx) {
  using namespace exp_constants;
  const __m256 x = vx;
  __m256 xc = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(kMin)), _mm256_set1_ps(kMax));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(xc, _mm256_set1_ps(kLog2e)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(kLn2Hi), xc);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(kLn2Lo), r);
  __m256 y = _mm256_set1_ps(kP0);
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(kP1));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(kP2));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(kP3));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(kP4));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(kP5));
  y = _mm256_fmadd_ps(y, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  const __m256i bits = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  __m256 result = _mm256_mul_ps(y, _mm256_castsi256_ps(bits));
  result = _mm256_blendv_ps(result, _mm256_setzero_ps(), _mm256_cmp_ps(x, _mm256_set1_ps(kFlushBelow), _CMP_LT_OQ));
  return _mm256_blendv_ps(result, x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));  // NaN in, NaN out
}
#else
inline at::vec::Vectorized<float> fast_exp(const at::vec::Vectorized<float>& x) { return x.exp(); }
#endif

inline at::vec::Vectorized<double> fast_exp(const at::vec::Vectorized<double>& x) { return x.exp(); }

}  // namespace attn::ops::cpu::ATTN_KERNEL_NAMESPACE
