// The int8 cache's dot products (products/int8_dot.h) on AVX512-VNNI: the only file compiled with -mavx512vnni
// (cmake/kernel_isa.cmake), so that no other code uses instructions a CPU with AVX-512 may lack.

#include "ops/cpu/products/int8_dot.h"

#include <immintrin.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>

namespace attn::ops::cpu {
namespace {

constexpr float kInt16Max = 32767.0f;
/// Keys whose weights share one int16 scale (their largest / 32767) and one int32 sum: blocks, so that a peaked
/// softmax's many small weights are rounded against their own block's largest rather than the peak. Measured on
/// a peaked 1000-key split, as a share of the output's largest element: one scale for the split 2.8e-4, blocks
/// of 64 keys 6.8e-5, of 16 keys 3.2e-5, against 3.1e-5 from the query's rounding; blocks of 64 cost 8 % of
/// the products' time, of 16 about 12 %.
constexpr int64_t kWeightBlock = 64;
/// Keys whose weights are rounded at a time (a buffer on the stack).
constexpr int64_t kValueKeys = 256;
static_assert(kWeightBlock % 16 == 0 && kValueKeys % kWeightBlock == 0, "blocks of whole vectors");

/// 32 int8 elements at p, sign-extended to int16.
inline __m512i widen(const int8_t* p) {
  return _mm512_cvtepi8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}

#define ATTN_INLINE inline __attribute__((always_inline))

/// Lane i of the result is the sum of the 16 lanes of v[i]: pairs of vectors folded within 128-bit blocks,
/// then the blocks of four vectors' partial sums transposed and added (45 instructions for 16 sums).
ATTN_INLINE __m512i sum_lanes16(const __m512i (&v)[16]) {
  __m512i two[8], four[4];
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i) {  // per block: (a0+a2, b0+b2, a1+a3, b1+b3)
    two[i] = _mm512_add_epi32(_mm512_unpacklo_epi32(v[2 * i], v[2 * i + 1]),
                              _mm512_unpackhi_epi32(v[2 * i], v[2 * i + 1]));
  }
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i) {  // per block: (a, b, c, d), each a quarter of its sum
    four[i] = _mm512_add_epi32(_mm512_unpacklo_epi64(two[2 * i], two[2 * i + 1]),
                               _mm512_unpackhi_epi64(two[2 * i], two[2 * i + 1]));
  }
  const auto fold = [](__m512i a, __m512i b) {  // blocks (a0 + a1, a2 + a3, b0 + b1, b2 + b3)
    return _mm512_add_epi32(_mm512_shuffle_i32x4(a, b, _MM_SHUFFLE(2, 0, 2, 0)),
                            _mm512_shuffle_i32x4(a, b, _MM_SHUFFLE(3, 1, 3, 1)));
  };
  return fold(fold(four[0], four[1]), fold(four[2], four[3]));
}

ATTN_INLINE void prefetch_row(const int8_t* row, int64_t width) {
  for (int64_t e = 0; e < width; e += 64) _mm_prefetch(reinterpret_cast<const char*>(row + e), _MM_HINT_T0);
}

/// Lane r · K + c of the result is Σ_e q16[r · dk + e] · k[c][e], for R rows and K keys, R · K <= 16 (the other
/// lanes 0). One row widens each key as it multiplies it; more rows keep the K widened keys in registers.
template <int R, int K>
ATTN_INLINE __m512i dot_tile(const int16_t* q16, int64_t dk, const int8_t* const* k) {
  static_assert(R * K <= 16, "the accumulators and keys must fit the 32 registers");
  __m512i acc[16];
#pragma GCC unroll 16
  for (int i = 0; i < 16; ++i) acc[i] = _mm512_setzero_si512();
  for (int64_t e = 0; e < dk; e += 32) {
    if constexpr (R == 1) {
      const __m512i q = _mm512_loadu_si512(q16 + e);
#pragma GCC unroll 16
      for (int c = 0; c < K; ++c) acc[c] = _mm512_dpwssd_epi32(acc[c], q, widen(k[c] + e));
    } else {
      __m512i key[K];
#pragma GCC unroll 16
      for (int c = 0; c < K; ++c) key[c] = widen(k[c] + e);
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) {
        const __m512i q = _mm512_loadu_si512(q16 + r * dk + e);
#pragma GCC unroll 16
        for (int c = 0; c < K; ++c) acc[r * K + c] = _mm512_dpwssd_epi32(acc[r * K + c], q, key[c]);
      }
    }
  }
  return sum_lanes16(acc);
}

/// One key against R rows (the keys past the last whole tile).
template <int R>
inline void dot_one(const int16_t* q16, int64_t dk, const int8_t* k, int32_t* dots) {
  __m512i acc[R];
  for (__m512i& a : acc) a = _mm512_setzero_si512();
  for (int64_t e = 0; e < dk; e += 32) {
    const __m512i key = widen(k + e);
    for (int r = 0; r < R; ++r) acc[r] = _mm512_dpwssd_epi32(acc[r], _mm512_loadu_si512(q16 + r * dk + e), key);
  }
  for (int r = 0; r < R; ++r) dots[r] = _mm512_reduce_add_epi32(acc[r]);
}

/// Lane i: key_scales[i % K], for K = 4, 8 or 16.
template <int K>
ATTN_INLINE __m512 key_lanes(const float* key_scales) {
  if constexpr (K == 4) return _mm512_broadcast_f32x4(_mm_loadu_ps(key_scales));
  if constexpr (K == 8) return _mm512_broadcast_f32x8(_mm256_loadu_ps(key_scales));
  if constexpr (K == 16) return _mm512_loadu_ps(key_scales);
}

/// s[r · lds + j] = lane r · K + j of x, for r < R and j < K.
template <int R, int K>
ATTN_INLINE void store_tile(__m512 x, float* s, int64_t lds) {
  if constexpr (K == 16) {
    _mm512_storeu_ps(s, x);
  } else if constexpr (K == 8) {
    _mm256_storeu_ps(s, _mm512_castps512_ps256(x));
    if constexpr (R > 1) _mm256_storeu_ps(s + lds, _mm512_extractf32x8_ps(x, 1));
  } else {
    static_assert(K == 4, "tiles of 4, 8 or 16 keys");
    _mm_storeu_ps(s, _mm512_castps512_ps128(x));
    if constexpr (R > 1) _mm_storeu_ps(s + lds, _mm512_extractf32x4_ps(x, 1));
    if constexpr (R > 2) _mm_storeu_ps(s + 2 * lds, _mm512_extractf32x4_ps(x, 2));
    if constexpr (R > 3) _mm_storeu_ps(s + 3 * lds, _mm512_extractf32x4_ps(x, 3));
  }
}

template <int R, int K>
void scores(const int16_t* q16, const float* q_scales, const int8_t* const* keys, const float* key_scales, int64_t n,
            int64_t dk, float scale, float* s, int64_t lds, const int8_t* const* values, int64_t dv, int64_t ahead) {
  static_assert(R * K == 16 || (R == 3 && K == 4), "a tile fills the 16 lanes of the sums");
  alignas(64) float row_lanes[16] = {};
  for (int i = 0; i < R * K; ++i) row_lanes[i] = scale * q_scales[i / K];
  const __m512 row_scale = _mm512_load_ps(row_lanes);
  int64_t c = 0;
  for (; c + K <= n; c += K) {
    for (int64_t a = c + ahead; a < std::min(c + ahead + K, n); ++a) {
      prefetch_row(keys[a], dk);
      prefetch_row(values[a], dv);
    }
    const __m512 dots = _mm512_cvtepi32_ps(dot_tile<R, K>(q16, dk, keys + c));
    store_tile<R, K>(_mm512_mul_ps(_mm512_mul_ps(dots, row_scale), key_lanes<K>(key_scales + c)), s + c, lds);
  }
  int32_t dots[R];
  for (; c < n; ++c) {
    dot_one<R>(q16, dk, keys[c], dots);
    for (int r = 0; r < R; ++r) s[r * lds + c] = static_cast<float>(dots[r]) * (scale * q_scales[r]) * key_scales[c];
  }
}

/// Where lane l of the pair products' low (unpacklo) and high (unpackhi) halves belong: within 128-bit block j,
/// the low half holds elements 8j .. 8j+3 and the high half 8j+4 .. 8j+7. These indices of
/// _mm512_permutex2var_ps(low, index, high) put elements 0..15 and 16..31 back in order.
inline __m512i first_sixteen() { return _mm512_setr_epi32(0, 1, 2, 3, 16, 17, 18, 19, 4, 5, 6, 7, 20, 21, 22, 23); }
inline __m512i second_sixteen() {
  return _mm512_setr_epi32(8, 9, 10, 11, 24, 25, 26, 27, 12, 13, 14, 15, 28, 29, 30, 31);
}

/// out[r · dv + e0 + i] += Σ_c w16[r][c] · scales[r][c / kWeightBlock] · v[c][e0 + i] for i < 32: the keys go
/// in pairs, their widened elements interleaved (unpacklo/unpackhi) so that each lane's pair is (v[c][i],
/// v[c+1][i]) and one broadcast of the pair of weights multiplies it. Each block's int32 sums go into float
/// accumulators with that block's scale. n is even (the pad weight is zero).
template <int R>
void weighted_chunk(const int16_t* w16, int64_t ldw, const float* scales, int64_t lds, int64_t n,
                    const int8_t* const* v, int64_t e0, float* out, int64_t dv) {
  __m512 sum[2 * R];
#pragma GCC unroll 8
  for (int i = 0; i < 2 * R; ++i) sum[i] = _mm512_setzero_ps();
  for (int64_t c0 = 0; c0 < n; c0 += kWeightBlock) {
    __m512i acc[2 * R];
#pragma GCC unroll 8
    for (int i = 0; i < 2 * R; ++i) acc[i] = _mm512_setzero_si512();
    const int64_t end = std::min(n, c0 + kWeightBlock);
    for (int64_t c = c0; c < end; c += 2) {
      const __m512i a = widen(v[c] + e0), b = widen(v[c + 1] + e0);
      const __m512i low = _mm512_unpacklo_epi16(a, b), high = _mm512_unpackhi_epi16(a, b);
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) {
        int32_t pair;
        std::memcpy(&pair, w16 + r * ldw + c, sizeof(pair));
        const __m512i w = _mm512_set1_epi32(pair);
        acc[2 * r] = _mm512_dpwssd_epi32(acc[2 * r], low, w);
        acc[2 * r + 1] = _mm512_dpwssd_epi32(acc[2 * r + 1], high, w);
      }
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const __m512 scale = _mm512_set1_ps(scales[r * lds + c0 / kWeightBlock]);
      sum[2 * r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc[2 * r]), scale, sum[2 * r]);
      sum[2 * r + 1] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc[2 * r + 1]), scale, sum[2 * r + 1]);
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
    float* dst = out + r * dv + e0;
    _mm512_storeu_ps(dst, _mm512_add_ps(_mm512_permutex2var_ps(sum[2 * r], first_sixteen(), sum[2 * r + 1]),
                                        _mm512_loadu_ps(dst)));
    _mm512_storeu_ps(dst + 16, _mm512_add_ps(_mm512_permutex2var_ps(sum[2 * r], second_sixteen(), sum[2 * r + 1]),
                                             _mm512_loadu_ps(dst + 16)));
  }
}

template <int R>
void weighted_sum(const int16_t* w16, int64_t ldw, const float* scales, int64_t lds, int64_t n,
                  const int8_t* const* v, int64_t dv, float* out) {
  for (int64_t e0 = 0; e0 < dv; e0 += 32) weighted_chunk<R>(w16, ldw, scales, lds, n, v, e0, out, dv);
}

/// 32767 / largest, the factor that rounds values up to `largest` in magnitude to int16: at most FLT_MAX, so that
/// a tiny largest (below 32767 / FLT_MAX) still gives finite products (0 stays 0), and 0 for an all-zero row.
inline float rounding_factor(float largest) {
  return largest > 0.0f ? static_cast<float>(std::min<double>(32767.0 / largest, FLT_MAX)) : 0.0f;
}

/// The smallest largest magnitude a row may have for its int16 scale (largest / 32767) to be a normal float:
/// below it the scale loses bits, and the caller widens instead.
constexpr float kSmallestRoundedRow = 32767.0f * FLT_MIN;

/// Whether the weights w[0, n) can be rounded to int16: all finite, and their largest magnitude 0 or at least
/// kSmallestRoundedRow.
bool roundable(const float* w, int64_t n) {
  __mmask16 bad = 0;
  __m512 most = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 x = _mm512_loadu_ps(w + i);
    bad |= _mm512_cmp_ps_mask(_mm512_sub_ps(x, x), _mm512_setzero_ps(), _CMP_NEQ_UQ);  // NaN or ±Inf
    most = _mm512_max_ps(most, _mm512_abs_ps(x));
  }
  float largest = _mm512_reduce_max_ps(most);
  for (; i < n; ++i) {
    bad |= !std::isfinite(w[i]);
    largest = std::max(largest, std::fabs(w[i]));
  }
  return bad == 0 && (largest == 0.0f || largest >= kSmallestRoundedRow);
}

/// w16[i] = round(w[i] / scales[i / kWeightBlock]) with scales[j] = the largest |w| of block j / 32767, for
/// i < n (finite), and a zero pad where n is odd.
void round_weights(const float* w, int64_t n, int16_t* w16, float* scales) {
  for (int64_t c0 = 0; c0 < n; c0 += kWeightBlock) {
    const int64_t m = std::min(kWeightBlock, n - c0);
    float largest = 0.0f;
    if (m == kWeightBlock) {
      __m512 most = _mm512_setzero_ps();
      for (int64_t h = 0; h < kWeightBlock; h += 16) most = _mm512_max_ps(most, _mm512_abs_ps(_mm512_loadu_ps(w + c0 + h)));
      largest = _mm512_reduce_max_ps(most);
    } else {
      for (int64_t j = 0; j < m; ++j) largest = std::max(largest, std::fabs(w[c0 + j]));
    }
    scales[c0 / kWeightBlock] = largest / kInt16Max;
    const float inv = rounding_factor(largest);
    if (m == kWeightBlock) {
      const __m512 vinv = _mm512_set1_ps(inv);
      const __m512i top = _mm512_set1_epi32(32767), bottom = _mm512_set1_epi32(-32767);
      for (int64_t h = 0; h < kWeightBlock; h += 16) {
        const __m512i x = _mm512_max_epi32(
            _mm512_min_epi32(_mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(w + c0 + h), vinv)), top), bottom);
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(w16 + c0 + h), _mm512_cvtepi32_epi16(x));
      }
    } else {
      for (int64_t j = 0; j < m; ++j) {
        w16[c0 + j] = static_cast<int16_t>(std::clamp(std::nearbyint(w[c0 + j] * inv), -kInt16Max, kInt16Max));
      }
    }
  }
  if (n % 2) w16[n] = 0;
}

}  // namespace

bool quantize_query_rows(const float* q, int64_t rows, int64_t dk, int16_t* q16, float* q_scales) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* x = q + r * dk;
    float m = 0.0f;
    for (int64_t e = 0; e < dk; ++e) {
      if (!std::isfinite(x[e])) return false;
      m = std::max(m, std::fabs(x[e]));
    }
    if (m > 0.0f && m < kSmallestRoundedRow) return false;
    q_scales[r] = m / kInt16Max;
    const float inv = rounding_factor(m);
    for (int64_t e = 0; e < dk; ++e) {
      q16[r * dk + e] = static_cast<int16_t>(std::clamp(std::nearbyint(x[e] * inv), -kInt16Max, kInt16Max));
    }
  }
  return true;
}

void int8_dot_scores(int64_t rows, const int16_t* q16, const float* q_scales, const int8_t* const* keys,
                     const float* key_scales, int64_t n, int64_t dk, float scale, float* s, int64_t lds,
                     const int8_t* const* values, int64_t dv, int64_t ahead) {
  switch (rows) {
    case 1: return scores<1, 16>(q16, q_scales, keys, key_scales, n, dk, scale, s, lds, values, dv, ahead);
    case 2: return scores<2, 8>(q16, q_scales, keys, key_scales, n, dk, scale, s, lds, values, dv, ahead);
    case 3: return scores<3, 4>(q16, q_scales, keys, key_scales, n, dk, scale, s, lds, values, dv, ahead);
    default: return scores<4, 4>(q16, q_scales, keys, key_scales, n, dk, scale, s, lds, values, dv, ahead);
  }
}

bool int8_dot_weighted_sum(int64_t rows, const float* w, int64_t ldw, int64_t n, const int8_t* const* values,
                           int64_t dv, float* out) {
  constexpr int64_t kRows = 4, kBlocks = kValueKeys / kWeightBlock;
  alignas(64) int16_t w16[kRows][kValueKeys];
  float scales[kRows][kBlocks];
  const int8_t* pairs[kValueKeys];  // the value rows, the last repeated to pair an odd count
  // Every weight is checked before anything is added, so that widening instead starts from out as it was.
  for (int64_t r = 0; r < rows; ++r) {
    if (!roundable(w + r * ldw, n)) return false;
  }
  for (int64_t c0 = 0; c0 < n; c0 += kValueKeys) {
    const int64_t m = std::min(kValueKeys, n - c0), even = m + m % 2;
    for (int64_t r = 0; r < rows; ++r) round_weights(w + r * ldw + c0, m, w16[r], scales[r]);
    std::copy_n(values + c0, m, pairs);
    if (m % 2) pairs[m] = values[c0 + m - 1];
    switch (rows) {
      case 1: weighted_sum<1>(&w16[0][0], kValueKeys, &scales[0][0], kBlocks, even, pairs, dv, out); break;
      case 2: weighted_sum<2>(&w16[0][0], kValueKeys, &scales[0][0], kBlocks, even, pairs, dv, out); break;
      case 3: weighted_sum<3>(&w16[0][0], kValueKeys, &scales[0][0], kBlocks, even, pairs, dv, out); break;
      default: weighted_sum<4>(&w16[0][0], kValueKeys, &scales[0][0], kBlocks, even, pairs, dv, out); break;
    }
  }
  return true;
}

}  // namespace attn::ops::cpu
