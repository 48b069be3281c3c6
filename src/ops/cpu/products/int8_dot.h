#pragma once
// The decode kernel's products over an int8 cache as integer dot products (AVX512-VNNI's vpdpwssd: each of 16
// lanes adds a0·b0 + a1·b1 for one pair of int16 from each operand, into int32). Widening each int8 element to
// float costs two instructions and each product one FMA per 16 elements; here an element is widened to int16
// with one instruction per 32 and a product takes one instruction per 32, so with four query heads per K/V head
// the step is bound by memory again instead of by arithmetic (bench/RESULTS.md, issue 33).
//
// The other operand is rounded to int16 for it: a query row with a scale of max|q| / 32767, and a row's weights
// (probability times the value row's scale) per block of 64 keys with the block's max |w| / 32767. Each rounded
// element is off by at most 1/65534 of its row's (or block's) largest, 1/258 of the rounding error an int8
// element already carries (half its step); docs/decoding.md gives the measured error. Only
// int8_dot_avx512vnni.cpp is compiled with AVX512-VNNI: call these only where int8_dot_route_chosen()
// (products/route.h).

#include <cstdint>

namespace attn::ops::cpu {

/// Head sizes the dot products take: whole vectors of 32 elements, and d_k <= 256 so that a score's int32 sum
/// cannot overflow (32767 · 128 · 256 < 2^31).
inline bool int8_dot_fits(int64_t dk, int64_t dv) { return dk % 32 == 0 && dk <= 256 && dv % 32 == 0; }

/// q16[r · dk + e] = round(q[r · dk + e] / q_scales[r]) with q_scales[r] = max_e |q[r · dk + e]| / 32767, for
/// r < rows. False, with nothing meaningful written, when a row holds a non-finite value (the caller then widens
/// instead, so that a NaN or Inf query gives what it gives on a float cache) or its largest is so small (below
/// 32767 · FLT_MIN, about 3.9e-34) that its scale would be subnormal.
bool quantize_query_rows(const float* q, int64_t rows, int64_t dk, int16_t* q16, float* q_scales);

/// s[r · lds + c] = scale · q_scales[r] · key_scales[c] · Σ_e q16[r · dk + e] · keys[c][e], for r < rows (1 to 4)
/// and c < n. The rows `ahead` keys on, of keys and of values[c] (dv elements), are requested from memory as the
/// sweep goes, so that the weighted sum that follows reads the values from L2.
void int8_dot_scores(int64_t rows, const int16_t* q16, const float* q_scales, const int8_t* const* keys,
                     const float* key_scales, int64_t n, int64_t dk, float scale, float* s, int64_t lds,
                     const int8_t* const* values, int64_t dv, int64_t ahead);

/// out[r · dv + e] += Σ_{c < n} w[r · ldw + c] · values[c][e] for r < rows (1 to 4), with each row's weights
/// (probabilities times the value rows' scales) rounded to int16 per block of keys against the block's largest
/// magnitude. False, with out untouched, when a weight is not finite or a row's largest is below 32767 · FLT_MIN:
/// the caller then widens.
bool int8_dot_weighted_sum(int64_t rows, const float* w, int64_t ldw, int64_t n, const int8_t* const* values,
                           int64_t dv, float* out);

}  // namespace attn::ops::cpu
