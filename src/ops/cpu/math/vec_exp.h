#pragma once
// exp() for the softmax rows, faster than at::vec's (SLEEF's 1-ulp expf): 2^t, t = x · log2 e, from a
// polynomial in t's fraction (math/exp_polynomial.h, with its accuracy). exp(-inf) is exactly 0, as the masks
// need; NaN stays NaN. float64 and the portable variant use at::vec's exp.
//
// Included by math/rows.h, so it is compiled once per instruction set (CPU_CAPABILITY_*).

#include <ATen/cpu/vec/vec.h>

#if defined(CPU_CAPABILITY_AVX512)
#include "ops/cpu/math/exp_avx512.h"
#elif defined(CPU_CAPABILITY_AVX2)
#include "ops/cpu/math/exp_polynomial.h"

#include <immintrin.h>
#endif

namespace attn::ops::cpu::ATTN_KERNEL_NAMESPACE {

#if defined(CPU_CAPABILITY_AVX512)
inline at::vec::Vectorized<float> fast_exp(const at::vec::Vectorized<float>& x) { return exp_avx512(x); }
#elif defined(CPU_CAPABILITY_AVX2)
inline at::vec::Vectorized<float> fast_exp(const at::vec::Vectorized<float>& vx) {
  using namespace exp_polynomial;
  const __m256 x = vx;
  // Clamped to kMaxAvx2 from above only (-inf and the rest below kFlushBelow give 0 at the end).
  const __m256 t = _mm256_mul_ps(_mm256_min_ps(x, _mm256_set1_ps(kMaxAvx2)), _mm256_set1_ps(kLog2e));
  const __m256 n = _mm256_round_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m256 f = _mm256_sub_ps(t, n);
  const __m256 y = two_to_fraction(
      f, [](__m256 a, __m256 b, __m256 c) { return _mm256_fmadd_ps(a, b, c); },
      [](float v) { return _mm256_set1_ps(v); });
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
