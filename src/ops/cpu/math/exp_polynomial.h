#pragma once
// The softmax's exp, e^d = 2^t for t = d · log2 e: 2^round(t) times a polynomial of degree 5 in t's fraction, or,
// where the result is rounded to bfloat16 at once, 2^floor(t) times a cubic. Its constants and the polynomials,
// shared by the AVX-512 code (math/exp_avx512.h) and the AVX2 code (math/vec_exp.h).
//
// Accuracy, evaluated in float against float64: within 3e-7 relative for d in [-1, 0], where a row's largest
// weights lie. AVX-512 takes t's fraction from one FMA of d (math/exp_avx512.h): within 3.4e-7 on [-20, 0],
// growing with |d| only through kLog2e's own rounding. AVX2 rounds t first: 2e-6 at d = -30 and 4e-6 at the
// flush limit. Against the float64 result, a float32 attention output's mean error grew by about 1 % over that of
// the 2-ulp exp this replaced (T = 4096, d = 64: 1.019e-8 to 1.029e-8), for 11 vector instructions on AVX-512
// instead of 16 (what that gained: bench/RESULTS.md, "Kᵀ in panels, and a shorter exp"; the FMA's fraction took
// the count to 10).

namespace attn::ops::cpu::exp_polynomial {

inline constexpr float kLog2e = 1.44269504088896341f;

// 2^f on |f| <= 1/2, minimax for relative error (3e-7 evaluated in float), fitted in float64 by iteratively
// reweighted least squares.
inline constexpr float kC0 = 1.0000001192092896f, kC1 = 0.6931469440460205f, kC2 = 0.24022120237350464f,
                       kC3 = 0.05550713092088699f, kC4 = 0.009675541892647743f, kC5 = 0.001327647129073739f;

/// 2^f for |f| <= 1/2, by Horner's rule on any vector type: fma(a, b, c) = a·b + c, and splat(x) is x in every
/// lane. The caller's instruction set picks both.
template <typename Vec, typename Fma, typename Splat>
inline Vec two_to_fraction(Vec f, Fma fma, Splat splat) {
  Vec y = splat(kC5);
  y = fma(y, f, splat(kC4));
  y = fma(y, f, splat(kC3));
  y = fma(y, f, splat(kC2));
  y = fma(y, f, splat(kC1));
  return fma(y, f, splat(kC0));
}

// 2^f on [0, 1) to bfloat16's precision, for weights rounded to bfloat16 at once (the bfloat16 routes' P), where
// f is t - floor(t) (math/exp_avx512.h): minimax for relative error with 2^0 = 1 and 2^1 = 2 exact, so that 2^t
// is continuous where floor(t) steps (a row's maximum, whose t may round a hair below 0, weighs 1 rounded to
// bfloat16); 1.03e-4 evaluated in float (fitted as above), 38x below bfloat16's rounding (3.9e-3); two FMAs fewer
// than two_to_fraction.
inline constexpr float kB0 = 1.0f, kB1 = 0.6954243779182434f, kB2 = 0.226307675242424f, kB3 = 0.07826796919107437f;

template <typename Vec, typename Fma, typename Splat>
inline Vec two_to_fraction_bfloat16(Vec f, Fma fma, Splat splat) {
  Vec y = splat(kB3);
  y = fma(y, f, splat(kB2));
  y = fma(y, f, splat(kB1));
  return fma(y, f, splat(kB0));
}

/// vreduceps's immediate for t - floor(t): no fraction bits kept (bits 7-4 zero), the precision exception
/// suppressed (bit 3), rounding down (bits 1-0 = 01).
inline constexpr int kFractionAboveFloor = 0x09;

// Below this, e^d (< 9e-27) is exactly 0. Next to a softmax row sum >= 1 such a weight changes nothing a float
// sum can hold, but its products in P·V underflow to subnormals, each ~100x slower (ALiBi's far keys land
// there by the thousand: +35% time before the flush, +4% after).
inline constexpr float kFlushBelow = -60.0f;

// Above 88.73, e^d overflows float. AVX2 builds 2^n's exponent bits itself, so it clamps at kMaxAvx2, where
// n = 128 makes them all ones: +inf. AVX-512's vscalefps takes any exponent, and needs no clamp.
inline constexpr float kMaxAvx2 = 88.3762626647949f;

// 1.5 · 2^23: t + kRoundShift - kRoundShift is t rounded to the nearest integer, for |t| < 2^22.
inline constexpr float kRoundShift = 12582912.0f;

}  // namespace attn::ops::cpu::exp_polynomial
