#pragma once
// e^d on AVX-512 (math/exp_polynomial.h): one definition for the float softmax rows (math/vec_exp.h) and, with
// the cubic to bfloat16's precision, the bfloat16 routes' rounding passes (products/bf16_softmax_avx512bf16.cpp).
// Include only where AVX-512 is enabled. Internal linkage, so each including file keeps the copy compiled with
// its own flags.

#include "ops/cpu/math/exp_polynomial.h"

#include <immintrin.h>

namespace attn::ops::cpu {
namespace {

/// e^d for the kernels' shifted scores, d = s - max <= 0: exactly 0 below kFlushBelow, -inf included; NaN in,
/// NaN out. (A positive d is right too, up to kRoundShift's range (2.9e6) at full precision, +inf past float's;
/// +inf gives NaN.)
/// kBfloat16Precision takes a shorter way, within 8.6e-5 relative: for weights rounded to bfloat16.
template <bool kBfloat16Precision = false>
inline __m512 exp_avx512(__m512 d) {
  using namespace exp_polynomial;
  // NaN compares unordered and is kept; every other lane below the limit becomes 0 in the zero-masked
  // vscalefps at the end, whatever the polynomial made of it (NaN for -inf).
  const __mmask16 keep = _mm512_cmp_ps_mask(d, _mm512_set1_ps(kFlushBelow), _CMP_NLT_UQ);
  const auto fma = [](__m512 a, __m512 b, __m512 c) { return _mm512_fmadd_ps(a, b, c); };
  const auto splat = [](float x) { return _mm512_set1_ps(x); };
  if constexpr (kBfloat16Precision) {
    // t = d · log2 e rounded once (2.5e-6 relative at the flush limit, far below the cubic's error), and
    // vreduceps's t - floor(t) in [0, 1) as the fraction, whose floor vscalefps takes from t itself: two
    // instructions where rounding t by adds and taking the fraction by an FMA is three. d = 0 gives exactly 1.
    const __m512 t = _mm512_mul_ps(d, _mm512_set1_ps(kLog2e));
    const __m512 f = _mm512_reduce_ps(t, kFractionAboveFloor);
    return _mm512_maskz_scalef_ps(keep, two_to_fraction_bfloat16(f, fma, splat), t);  // y · 2^floor(t); NaN stays NaN
  }
  // n = round(d · log2 e): adding 1.5 · 2^23 leaves the rounded integer in the low mantissa bits, and taking it
  // away again gives it as a float (two adds, where vrndscaleps is two uops on Intel). The fraction comes from
  // one FMA of d itself, so t = d · log2 e is never rounded on its own.
  const __m512 log2e = _mm512_set1_ps(kLog2e), round_shift = _mm512_set1_ps(kRoundShift);
  const __m512 n = _mm512_sub_ps(_mm512_fmadd_ps(d, log2e, round_shift), round_shift);
  const __m512 f = _mm512_fmsub_ps(d, log2e, n);
  return _mm512_maskz_scalef_ps(keep, two_to_fraction(f, fma, splat), n);  // y · 2^n; NaN stays NaN
}

}  // namespace
}  // namespace attn::ops::cpu
