#pragma once
// e^d on AVX-512 (math/exp_polynomial.h): one definition for the float softmax rows (math/vec_exp.h) and the
// bfloat16 route's rounding pass (products/bf16_softmax_avx512bf16.cpp). Include only where AVX-512 is
// enabled. Internal linkage, so each including file keeps the copy compiled with its own flags.

#include "ops/cpu/math/exp_polynomial.h"

#include <immintrin.h>

namespace attn::ops::cpu {
namespace {

/// e^d for d <= 0 (the kernels' shifted scores), exactly 0 below kFlushBelow, -inf included; NaN in, NaN out;
/// +inf past float's range.
inline __m512 exp_avx512(__m512 d) {
  using namespace exp_polynomial;
  // NaN compares unordered and is kept; every other lane below the limit becomes 0 in the zero-masked
  // vscalefps at the end, whatever the polynomial made of it (NaN for -inf).
  const __mmask16 keep = _mm512_cmp_ps_mask(d, _mm512_set1_ps(kFlushBelow), _CMP_NLT_UQ);
  // vminps returns its second operand when either is NaN: d goes second, so NaN passes through.
  const __m512 t = _mm512_mul_ps(_mm512_min_ps(_mm512_set1_ps(kOverflowClamp), d), _mm512_set1_ps(kLog2e));
  const __m512 n = _mm512_roundscale_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 f = _mm512_sub_ps(t, n);
  const __m512 y = two_to_fraction(
      f, [](__m512 a, __m512 b, __m512 c) { return _mm512_fmadd_ps(a, b, c); },
      [](float x) { return _mm512_set1_ps(x); });
  return _mm512_maskz_scalef_ps(keep, y, n);  // y · 2^n
}

}  // namespace
}  // namespace attn::ops::cpu
