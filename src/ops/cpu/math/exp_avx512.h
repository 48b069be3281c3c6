#pragma once
// e^d on AVX-512 (math/exp_polynomial.h): one definition for the float softmax rows (math/vec_exp.h) and, as 2^t
// with the cubic to bfloat16's precision, one for the bfloat16 routes' rounding pass
// (products/bf16_softmax_avx512bf16.cpp).
// Include only where AVX-512 is enabled. Internal linkage, so each including file keeps the copy compiled with
// its own flags.

#include "ops/cpu/math/exp_polynomial.h"

#include <immintrin.h>

namespace attn::ops::cpu {
namespace {

// The polynomials' fma and splat (math/exp_polynomial.h) on AVX-512.
inline constexpr auto avx512_fma = [](__m512 a, __m512 b, __m512 c) { return _mm512_fmadd_ps(a, b, c); };
inline constexpr auto avx512_splat = [](float x) { return _mm512_set1_ps(x); };

/// e^d for the kernels' shifted scores, d = s - max <= 0: exactly 0 below kFlushBelow, -inf included; NaN in,
/// NaN out. (A positive d is right too, up to kRoundShift's range (2.9e6), +inf past float's; +inf gives NaN.)
inline __m512 exp_avx512(__m512 d) {
  using namespace exp_polynomial;
  // NaN compares unordered and is kept; every other lane below the limit becomes 0 in the zero-masked
  // vscalefps at the end, whatever the polynomial made of it (NaN for -inf).
  const __mmask16 keep = _mm512_cmp_ps_mask(d, _mm512_set1_ps(kFlushBelow), _CMP_NLT_UQ);
  // n = round(d · log2 e): adding 1.5 · 2^23 leaves the rounded integer in the low mantissa bits, and taking it
  // away again gives it as a float (two adds, where vrndscaleps is two uops on Intel). The fraction comes from
  // one FMA of d itself, so t = d · log2 e is never rounded on its own.
  const __m512 log2e = _mm512_set1_ps(kLog2e), round_shift = _mm512_set1_ps(kRoundShift);
  const __m512 n = _mm512_sub_ps(_mm512_fmadd_ps(d, log2e, round_shift), round_shift);
  const __m512 f = _mm512_fmsub_ps(d, log2e, n);
  return _mm512_maskz_scalef_ps(keep, two_to_fraction(f, avx512_fma, avx512_splat), n);  // y · 2^n; NaN stays NaN
}

/// 2^t to bfloat16's precision (1.03e-4 relative), for weights rounded to bfloat16 at once: t = d · log2 e of the
/// shifted scores, which the caller forms in the same FMA that shifts them (one instruction where d and then t
/// take two). Exactly 0 below kFlushBelow · log2 e, -inf included; NaN in, NaN out; t = 0 gives exactly 1,
/// and so does a t a hair below it (exp_polynomial.h's cubic is continuous at 1).
inline __m512 exp2_avx512_bfloat16(__m512 t) {
  using namespace exp_polynomial;
  // Flushed as exp_avx512 flushes: a subnormal out of vscalefps costs ~40x the vector's time.
  const __mmask16 keep = _mm512_cmp_ps_mask(t, _mm512_set1_ps(kFlushBelow * kLog2e), _CMP_NLT_UQ);
  // vreduceps's t - floor(t) in [0, 1) as the fraction, whose floor vscalefps takes from t itself.
  const __m512 f = _mm512_reduce_ps(t, kFractionAboveFloor);
  return _mm512_maskz_scalef_ps(keep, two_to_fraction_bfloat16(f, avx512_fma, avx512_splat), t);  // y · 2^floor(t)
}

}  // namespace
}  // namespace attn::ops::cpu
