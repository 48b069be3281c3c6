// The bfloat16 route's softmax step (ops/cpu/products/bf16_softmax.h). CMake compiles this file with AVX512-BF16
// enabled, for vcvtneps2bf16 (one instruction rounds 16 floats to bfloat16, where widening code takes eight).

#include "ops/cpu/products/bf16_softmax.h"

#include "ops/cpu/math/exp_avx512.h"
#include "ops/cpu/products/transpose_16x16.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <limits>

namespace attn::ops::cpu {

namespace {

/// exp_round_sum's pass, e = exp_of(a vector of s); with kPeak, *peak = the largest s[j] as well.
template <bool kPeak, typename ExpOf>
float round_row_pass(const float* s, int64_t n, c10::BFloat16* p, int64_t padded, ExpOf exp_of, float* peak) {
  __m512 sum0 = _mm512_setzero_ps(), sum1 = _mm512_setzero_ps();
  __m512 top0 = _mm512_set1_ps(-__builtin_inff()), top1 = top0;
  int64_t j = 0;
  for (; j + 32 <= n; j += 32) {  // two vectors at a time: two independent chains through the polynomial
    const __m512 x0 = _mm512_loadu_ps(s + j), x1 = _mm512_loadu_ps(s + j + 16);
    if constexpr (kPeak) {
      top0 = _mm512_max_ps(top0, x0);
      top1 = _mm512_max_ps(top1, x1);
    }
    const __m512 e0 = exp_of(x0);
    const __m512 e1 = exp_of(x1);
    sum0 = _mm512_add_ps(sum0, e0);
    sum1 = _mm512_add_ps(sum1, e1);
    _mm512_storeu_si512(p + j, (__m512i)_mm512_cvtne2ps_pbh(e1, e0));
  }
  for (; j < n; j += 16) {
    const int64_t left = n - j < 16 ? n - j : 16;
    const __mmask16 m = static_cast<__mmask16>((1u << left) - 1u);
    // Masked-off lanes load -inf, so they add exactly 0 (and leave the peak as it is).
    const __m512 x = _mm512_mask_loadu_ps(_mm512_set1_ps(-__builtin_inff()), m, s + j);
    if constexpr (kPeak) top0 = _mm512_max_ps(top0, x);
    const __m512 e = exp_of(x);
    sum0 = _mm512_add_ps(sum0, e);
    _mm256_mask_storeu_epi16(p + j, m, (__m256i)_mm512_cvtneps_pbh(e));
  }
  std::fill(p + n, p + std::max(n, padded), c10::BFloat16(0.0f));
  if constexpr (kPeak) *peak = _mm512_reduce_max_ps(_mm512_max_ps(top0, top1));
  return _mm512_reduce_add_ps(_mm512_add_ps(sum0, sum1));
}

template <typename ExpOf>
float round_row(const float* s, int64_t n, c10::BFloat16* p, int64_t padded, ExpOf exp_of, float* peak) {
  if (peak) return round_row_pass<true>(s, n, p, padded, exp_of, peak);
  return round_row_pass<false>(s, n, p, padded, exp_of, peak);
}

/// Whether t = x · (scale · log2 e) - shift · log2 e can be formed in one FMA: shift · log2 e does not overflow
/// (a NaN shift passes, and gives NaN weights either way). Otherwise d = scale · x - shift first, then e^d at full
/// precision.
bool shift_fits_one_fma(float shift) {
  return std::isnan(shift) || std::fabs(shift) <= std::numeric_limits<float>::max() / exp_polynomial::kLog2e;
}

/// Word w of a rounded pair of rows [row i | row i + 1] made (row i's w, row i + 1's w): vpermw's indices.
alignas(64) constexpr uint16_t kInterleavePairs[32] = {0, 16, 1, 17, 2,  18, 3,  19, 4,  20, 5,  21, 6,  22, 7,  23,
                                                       8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31};

/// The block of rows [i0, i0 + 32) by columns [j0, j0 + 16) of a tile, row i's 16 floats given by row_of(i),
/// rounded to bfloat16 and stored transposed, t[(j0 + j) · ldt + i0 + i], and where by_rows is given also as they
/// lie, by_rows[(i0 + i) · ld_rows + j0 + j]. Each pair of rows is rounded into one register (its halves the two
/// rows), interleaved into words that are a column's two bfloat16, and the 16 × 16 words transposed: half the
/// shuffles of transposing floats.
template <typename RowOf>
inline void round_block_transposed(RowOf row_of, int64_t i0, int64_t j0, c10::BFloat16* t, int64_t ldt,
                                   c10::BFloat16* by_rows, int64_t ld_rows) {
  const __m512i interleave = _mm512_load_si512(kInterleavePairs);
  __m512i r[16];
  for (int64_t i = 0; i < 16; ++i) {
    const int64_t even = i0 + 2 * i;
    const __m512i both = (__m512i)_mm512_cvtne2ps_pbh(row_of(even + 1), row_of(even));
    if (by_rows) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(by_rows + even * ld_rows + j0), _mm512_castsi512_si256(both));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(by_rows + (even + 1) * ld_rows + j0),
                          _mm512_extracti64x4_epi64(both, 1));
    }
    r[i] = _mm512_permutexvar_epi16(interleave, both);
  }
  transpose_16x16(r);
  for (int64_t j = 0; j < 16; ++j) _mm512_storeu_si512(t + (j0 + j) * ldt + i0, r[j]);
}

}  // namespace

float exp_round_sum(const float* s, int64_t n, float scale, float shift, c10::BFloat16* p, int64_t padded,
                    float* peak) {
  using exp_polynomial::kLog2e;
  // t = (scale · s - shift) · log2 e in one FMA. Rounding scale · log2 e and shift · log2 e moves every weight of
  // the row by the same factor (within |shift| · 2^-23 relative), which the sum shares; beside it, t's error
  // grows only with |t|.
  if (shift_fits_one_fma(shift)) {
    const __m512 vscale = _mm512_set1_ps(scale * kLog2e), vshift = _mm512_set1_ps(shift * kLog2e);
    return round_row(s, n, p, padded,
                     [&](__m512 x) { return exp2_avx512_bfloat16(_mm512_fmsub_ps(x, vscale, vshift)); }, peak);
  }
  // A finite shift whose t would overflow: d = scale · s - shift first, then e^d at full precision.
  const __m512 vscale = _mm512_set1_ps(scale), vshift = _mm512_set1_ps(shift);
  return round_row(s, n, p, padded, [&](__m512 x) { return exp_avx512(_mm512_fmsub_ps(x, vscale, vshift)); }, peak);
}

void exp_to_bfloat16_precision(float* x, int64_t n, float scale, float shift) {
  using exp_polynomial::kLog2e;
  if (!shift_fits_one_fma(shift)) {
    const __m512 vscale = _mm512_set1_ps(scale), vshift = _mm512_set1_ps(shift);
    for (int64_t j = 0; j < n; j += 16) {
      const __mmask16 m = static_cast<__mmask16>((1u << (n - j < 16 ? n - j : 16)) - 1u);
      _mm512_mask_storeu_ps(x + j, m, exp_avx512(_mm512_fmsub_ps(_mm512_maskz_loadu_ps(m, x + j), vscale, vshift)));
    }
    return;
  }
  const __m512 vscale = _mm512_set1_ps(scale * kLog2e), vshift = _mm512_set1_ps(shift * kLog2e);
  int64_t j = 0;
  for (; j + 32 <= n; j += 32) {  // two independent chains through the polynomial
    const __m512 e0 = exp2_avx512_bfloat16(_mm512_fmsub_ps(_mm512_loadu_ps(x + j), vscale, vshift));
    const __m512 e1 = exp2_avx512_bfloat16(_mm512_fmsub_ps(_mm512_loadu_ps(x + j + 16), vscale, vshift));
    _mm512_storeu_ps(x + j, e0);
    _mm512_storeu_ps(x + j + 16, e1);
  }
  for (; j < n; j += 16) {
    const __mmask16 m = static_cast<__mmask16>((1u << (n - j < 16 ? n - j : 16)) - 1u);
    const __m512 t = _mm512_fmsub_ps(_mm512_maskz_loadu_ps(m, x + j), vscale, vshift);
    _mm512_mask_storeu_ps(x + j, m, exp2_avx512_bfloat16(t));
  }
}

void round_to_bfloat16(const float* s, int64_t n, c10::BFloat16* p, float scale) {
  const __m512 vscale = _mm512_set1_ps(scale);
  for (int64_t j = 0; j < n; j += 16) {
    const int64_t left = n - j < 16 ? n - j : 16;
    const __mmask16 m = static_cast<__mmask16>((1u << left) - 1u);
    const __m512 x = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, s + j), vscale);
    _mm256_mask_storeu_epi16(p + j, m, (__m256i)_mm512_cvtneps_pbh(x));
  }
  if (n % 2) p[n] = c10::BFloat16(0.0f);
}

void transpose_round_to_bfloat16(const float* s, int64_t lds, int64_t rows, int64_t cols, c10::BFloat16* t,
                                 int64_t ldt, float scale) {
  const __m512 vscale = _mm512_set1_ps(scale);
  for (int64_t j0 = 0; j0 < cols; j0 += 16) {
    const int64_t nj = std::min<int64_t>(16, cols - j0);
    const __mmask16 column_lanes = static_cast<__mmask16>((1u << nj) - 1u);
    int64_t i0 = 0;
    const auto scaled_row = [&](int64_t i) { return _mm512_mul_ps(_mm512_loadu_ps(s + i * lds + j0), vscale); };
    for (; nj == 16 && i0 + 32 <= rows; i0 += 32) round_block_transposed(scaled_row, i0, j0, t, ldt, nullptr, 0);
    // The rest in blocks of 16 × 16 floats through registers: masked loads past the last column, zeros past the
    // last row, and only the real rows and columns of the transpose stored.
    for (; i0 < rows; i0 += 16) {
      const int64_t ni = std::min<int64_t>(16, rows - i0);
      const __mmask16 row_lanes = static_cast<__mmask16>((1u << ni) - 1u);
      __m512i r[16];
      for (int64_t i = 0; i < 16; ++i) {
        r[i] = i < ni ? _mm512_castps_si512(_mm512_maskz_loadu_ps(column_lanes, s + (i0 + i) * lds + j0))
                      : _mm512_setzero_si512();
      }
      transpose_16x16(r);
      for (int64_t j = 0; j < nj; ++j) {
        const __m512 x = _mm512_mul_ps(_mm512_castsi512_ps(r[j]), vscale);
        _mm256_mask_storeu_epi16(t + (j0 + j) * ldt + i0, row_lanes, (__m256i)_mm512_cvtneps_pbh(x));
      }
    }
    if (rows % 2) {
      for (int64_t j = j0; j < j0 + nj; ++j) t[j * ldt + rows] = c10::BFloat16(0.0f);
    }
  }
}

void softmax_backward_round(const float* p, const float* dp, int64_t ld, int64_t rows, int64_t cols,
                            const float* delta, float scale, c10::BFloat16* by_rows, int64_t ld_rows,
                            c10::BFloat16* by_cols, int64_t ld_cols, c10::BFloat16* probs_by_cols) {
  const __m512 vscale = _mm512_set1_ps(scale), zero = _mm512_setzero_ps();
  // 32 rows at a time across the tile (P and dP stream from L2 a row after another), 16 columns a block.
  for (int64_t i0 = 0; i0 < rows; i0 += 32) {
    for (int64_t j0 = 0; j0 < cols; j0 += 16) {
      // softmax_backward_row's operations in its order, then the scale: p · (dp - delta), 0 where p == 0.
      const auto grad_score_row = [&](int64_t i) {
        const __m512 pv = _mm512_loadu_ps(p + i * ld + j0);
        const __mmask16 nonzero = _mm512_cmp_ps_mask(pv, zero, _CMP_NEQ_UQ);
        const __m512 grad_prob = _mm512_loadu_ps(dp + i * ld + j0);
        const __m512 ds = _mm512_maskz_mul_ps(nonzero, pv, _mm512_sub_ps(grad_prob, _mm512_set1_ps(delta[i])));
        return _mm512_mul_ps(ds, vscale);
      };
      const auto prob_row = [&](int64_t i) { return _mm512_loadu_ps(p + i * ld + j0); };
      round_block_transposed(grad_score_row, i0, j0, by_cols, ld_cols, by_rows, ld_rows);
      // P's block again, from L1 now.
      if (probs_by_cols) round_block_transposed(prob_row, i0, j0, probs_by_cols, ld_cols, nullptr, 0);
    }
  }
}

}  // namespace attn::ops::cpu
