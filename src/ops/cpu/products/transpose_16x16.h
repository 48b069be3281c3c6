#pragma once
// A 16 × 16 transpose of 32-bit words in AVX-512 registers, for packing right operands transposed (Kᵀ and Vᵀ)
// once per call: the bfloat16 route's pairs and the float tiles' floats. Include only where AVX-512 is enabled.
// Internal linkage, so each including file keeps the copy compiled with its own flags.

#include <immintrin.h>

namespace attn::ops::cpu {
namespace {

/// r[i] = column i of the 16 × 16 matrix of 32-bit words whose row i is r[i]: pairs within 128-bit lanes,
/// then quads, then the lanes themselves.
inline void transpose_16x16(__m512i r[16]) {
  __m512i t[16];
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
  }
  // r[4g + c], lane L: column 4L + c of rows 4g .. 4g + 3.
  for (int g = 0; g < 4; ++g) {
    r[4 * g] = _mm512_unpacklo_epi64(t[4 * g], t[4 * g + 2]);
    r[4 * g + 1] = _mm512_unpackhi_epi64(t[4 * g], t[4 * g + 2]);
    r[4 * g + 2] = _mm512_unpacklo_epi64(t[4 * g + 1], t[4 * g + 3]);
    r[4 * g + 3] = _mm512_unpackhi_epi64(t[4 * g + 1], t[4 * g + 3]);
  }
  for (int c = 0; c < 4; ++c) {
    const __m512i low01 = _mm512_shuffle_i32x4(r[c], r[4 + c], 0x44);
    const __m512i high01 = _mm512_shuffle_i32x4(r[c], r[4 + c], 0xEE);
    const __m512i low23 = _mm512_shuffle_i32x4(r[8 + c], r[12 + c], 0x44);
    const __m512i high23 = _mm512_shuffle_i32x4(r[8 + c], r[12 + c], 0xEE);
    t[c] = _mm512_shuffle_i32x4(low01, low23, 0x88);
    t[4 + c] = _mm512_shuffle_i32x4(low01, low23, 0xDD);
    t[8 + c] = _mm512_shuffle_i32x4(high01, high23, 0x88);
    t[12 + c] = _mm512_shuffle_i32x4(high01, high23, 0xDD);
  }
  for (int i = 0; i < 16; ++i) r[i] = t[i];
}

}  // namespace
}  // namespace attn::ops::cpu
