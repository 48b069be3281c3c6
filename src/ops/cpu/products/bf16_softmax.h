#pragma once
// The bfloat16 route's conversions of a float score row into the bfloat16 left operand of a tile product.
// Forward: P = exp(s - max) rounded to bfloat16 for P·V, and the float sum of the unrounded P for the row's
// normaliser, in one pass that reads the scores once and writes only the bfloat16 P (the float route's three
// passes, exp, sum and rounding, each read the row again). Backward: dS rounded for dS·K, and Pᵀ and dSᵀ rounded
// for Pᵀ·dO and dSᵀ·Q, as row-major left operands that AMX's tiles read where they lie; on whole tiles all three
// in one pass over P and dP. Only bf16_softmax_avx512bf16.cpp is compiled with AVX512-BF16 enabled: call these
// only where the CPU has it (Capability::Avx512Bf16).

#include <c10/util/BFloat16.h>

#include <cstdint>

namespace attn::ops::cpu {

/// p[j] = bfloat16(exp(scale · s[j] - shift)) for j < n, rounded to nearest even, and p[j] = 0 for n <= j <
/// padded (so that pair and tile reads never go past the row); returns Σ exp(scale · s[j] - shift) in float. The
/// exp is math/exp_avx512.h's to bfloat16's precision: within 1.03e-4 relative, 38x below bfloat16's rounding
/// (P is exactly 1 at the row's maximum); the sum carries the same 1.03e-4. exp(-inf) is 0; a NaN score
/// gives a NaN P and sum. scale folds the softmax scale in where the scores were left unscaled (the AMX route);
/// 1 otherwise. Where `peak` is given, *peak = the largest s[j] (unscaled; -inf for n = 0; a NaN may or may not
/// reach it), taken in the same pass: for a caller that shifts by a row maximum from earlier tiles and must learn
/// whether this tile's exceeds it.
float exp_round_sum(const float* s, int64_t n, float scale, float shift, c10::BFloat16* p, int64_t padded,
                    float* peak = nullptr);

/// x[j] = exp(scale · x[j] - shift) for j < n, in float but to bfloat16's precision (exp_round_sum's exp: 1.03e-4
/// relative, 0 below kFlushBelow, NaN kept): the backward's P on the AMX route, which feeds only products of
/// bfloat16 operands (Pᵀ·dO, and dS = P · (dP - delta) rounded for dSᵀ·Q and dS·K).
void exp_to_bfloat16_precision(float* x, int64_t n, float scale, float shift);

/// p[j] = bfloat16(scale · s[j]) for j < n, rounded to nearest even, and p[n] = 0 when n is odd. (scale folds the
/// softmax scale of dK and dQ into dS on the AMX route; 1 otherwise.)
void round_to_bfloat16(const float* s, int64_t n, c10::BFloat16* p, float scale = 1.0f);

/// t[j · ldt + i] = bfloat16(scale · s[i · lds + j]) for i < rows, j < cols, rounded to nearest even, and
/// t[j · ldt + rows] = 0 when rows is odd: the transpose of a float [rows, cols] block as a row-major bfloat16
/// left operand (LeftOperand{t, ldt, 2}) of `rows` columns, ldt >= rows rounded up to even.
void transpose_round_to_bfloat16(const float* s, int64_t lds, int64_t rows, int64_t cols, c10::BFloat16* t,
                                 int64_t ldt, float scale = 1.0f);

/// The softmax backward's dS = scale · p ⊙ (dp - delta[i]) (0 where p is 0, so that an Inf or NaN dP at a blocked
/// pair stays out) of a [rows, cols] tile (row stride ld), rows a multiple of 32 and cols of 16, rounded to
/// bfloat16 twice in one pass, with no float dS written: row-major into `by_rows` (row stride ld_rows), for dS·K,
/// and transposed into `by_cols` (t[j · ld_cols + i]), for dSᵀ·Q. The same bits as math/rows.h's
/// softmax_backward_row, then round_to_bfloat16 and transpose_round_to_bfloat16 with the scale. Where
/// probs_by_cols is given, p too is rounded into it transposed (row stride ld_cols), for Pᵀ·dO, unscaled: as
/// transpose_round_to_bfloat16 gives it.
void softmax_backward_round(const float* p, const float* dp, int64_t ld, int64_t rows, int64_t cols,
                            const float* delta, float scale, c10::BFloat16* by_rows, int64_t ld_rows,
                            c10::BFloat16* by_cols, int64_t ld_cols, c10::BFloat16* probs_by_cols = nullptr);

}  // namespace attn::ops::cpu
