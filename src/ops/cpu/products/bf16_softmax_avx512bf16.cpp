// The bfloat16 route's softmax step (ops/cpu/products/bf16_softmax.h). CMake compiles this file with AVX512-BF16
// enabled, for vcvtneps2bf16 (one instruction rounds 16 floats to bfloat16, where widening code takes eight).

#include "ops/cpu/products/bf16_softmax.h"

#include "ops/cpu/math/exp_avx512.h"

#include <immintrin.h>

namespace attn::ops::cpu {

float exp_round_sum(const float* s, int64_t n, float shift, c10::BFloat16* p) {
  const __m512 vshift = _mm512_set1_ps(shift);
  __m512 sum0 = _mm512_setzero_ps(), sum1 = _mm512_setzero_ps();
  int64_t j = 0;
  for (; j + 32 <= n; j += 32) {  // two vectors at a time: two independent chains through the polynomial
    const __m512 e0 = exp_avx512(_mm512_sub_ps(_mm512_loadu_ps(s + j), vshift));
    const __m512 e1 = exp_avx512(_mm512_sub_ps(_mm512_loadu_ps(s + j + 16), vshift));
    sum0 = _mm512_add_ps(sum0, e0);
    sum1 = _mm512_add_ps(sum1, e1);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p + j), (__m256i)_mm512_cvtneps_pbh(e0));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p + j + 16), (__m256i)_mm512_cvtneps_pbh(e1));
  }
  for (; j < n; j += 16) {
    const int64_t left = n - j < 16 ? n - j : 16;
    const __mmask16 m = static_cast<__mmask16>((1u << left) - 1u);
    // Masked-off lanes load -inf, so they add exactly 0.
    const __m512 x = _mm512_mask_loadu_ps(_mm512_set1_ps(-__builtin_inff()), m, s + j);
    const __m512 e = exp_avx512(_mm512_sub_ps(x, vshift));
    sum0 = _mm512_add_ps(sum0, e);
    _mm256_mask_storeu_epi16(p + j, m, (__m256i)_mm512_cvtneps_pbh(e));
  }
  if (n % 2) p[n] = c10::BFloat16(0.0f);
  return _mm512_reduce_add_ps(_mm512_add_ps(sum0, sum1));
}

void round_to_bfloat16(const float* s, int64_t n, c10::BFloat16* p) {
  for (int64_t j = 0; j < n; j += 16) {
    const int64_t left = n - j < 16 ? n - j : 16;
    const __mmask16 m = static_cast<__mmask16>((1u << left) - 1u);
    _mm256_mask_storeu_epi16(p + j, m, (__m256i)_mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(m, s + j)));
  }
  if (n % 2) p[n] = c10::BFloat16(0.0f);
}

}  // namespace attn::ops::cpu
