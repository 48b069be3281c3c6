#pragma once
// Register tiles for the decode kernel, and the widening loads (load_one, load_two) that the fused backward's row
// pass reads dO and O with too, and the BLAS route its bfloat16 tiles; compiled once per instruction set
// (CPU_CAPABILITY_*) as part of a variant file.
// Decoding streams each K/V row once and uses it for every query row of its group, so the arithmetic must keep up
// with memory: a tile keeps its accumulators in registers for a whole sweep of keys, widens a bfloat16 or int8 cache
// on the load, and sums the lanes of four dot products with one shuffle tree instead of four.

#include <ATen/cpu/vec/vec.h>
#include <c10/util/BFloat16.h>

#if defined(CPU_CAPABILITY_AVX512) || defined(CPU_CAPABILITY_AVX2)
#include <immintrin.h>
#endif

#include <cstdint>
#include <functional>
#include <tuple>
#include <type_traits>

namespace attn::ops::cpu::ATTN_KERNEL_NAMESPACE {

using at::vec::Vectorized;

/// Keys per score tile and vectors per value chunk: as many accumulators as the registers hold (32 on
/// AVX-512, 16 on AVX2) next to the loaded keys or values.
#if defined(CPU_CAPABILITY_AVX512)
inline constexpr int kScoreKeys = 4;
inline constexpr int kValueVectors = 4;
#else
inline constexpr int kScoreKeys = 2;
inline constexpr int kValueVectors = 2;
#endif
/// Query rows per tile (both kinds).
inline constexpr int kTileRows = 4;

/// Where the tiles find a cache's rows: evenly spaced, as in a contiguous cache...
template <typename KV>
struct StridedRows {
  const KV* base;
  int64_t stride;
  const KV* operator[](int64_t c) const { return base + c * stride; }
  StridedRows from(int64_t c) const { return {base + c * stride, stride}; }
};

/// ...or anywhere, one pointer per row, as a paged cache's rows gathered through its block table.
template <typename KV>
struct GatheredRows {
  const KV* const* rows;
  const KV* operator[](int64_t c) const { return rows[c]; }
  GatheredRows from(int64_t c) const { return {rows + c}; }
};

/// Vectorized<float>::size() int8 elements at p as floats, sign-extended on the load where the ISA has it (an int8 cache's row scale
/// is applied by the caller, decode/decode_kernel.h).
inline Vectorized<float> widen_int8(const int8_t* p) {
#if defined(CPU_CAPABILITY_AVX512)
  return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
#elif defined(CPU_CAPABILITY_AVX2)
  return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
#else
  float wide[Vectorized<float>::size()];
  for (int64_t i = 0; i < Vectorized<float>::size(); ++i) wide[i] = static_cast<float>(p[i]);
  return Vectorized<float>::loadu(wide);
#endif
}

/// Two vectors of T from the 2 · Vectorized<T>::size() elements at p, widened from bfloat16 or int8 if KV is.
template <typename T, typename KV>
inline void load_two(const KV* p, Vectorized<T>& lo, Vectorized<T>& hi) {
  if constexpr (std::is_same_v<T, KV>) {
    lo = Vectorized<T>::loadu(p);
    hi = Vectorized<T>::loadu(p + Vectorized<T>::size());
  } else if constexpr (std::is_same_v<KV, int8_t>) {
    static_assert(std::is_same_v<T, float>, "float from int8 only");
    lo = widen_int8(p);
    hi = widen_int8(p + Vectorized<float>::size());
  } else {
    static_assert(std::is_same_v<T, float> && std::is_same_v<KV, c10::BFloat16>, "float from bfloat16 only");
    std::tie(lo, hi) = at::vec::convert_bfloat16_float(Vectorized<c10::BFloat16>::loadu(p));
  }
}

/// One vector of T from the Vectorized<T>::size() elements at p.
template <typename T, typename KV>
inline Vectorized<T> load_one(const KV* p) {
  if constexpr (std::is_same_v<T, KV>) {
    return Vectorized<T>::loadu(p);
  } else if constexpr (std::is_same_v<KV, int8_t>) {
    static_assert(std::is_same_v<T, float>, "float from int8 only");
    return widen_int8(p);
  } else {
    Vectorized<T> lo, hi;
    std::tie(lo, hi) = at::vec::convert_bfloat16_float(Vectorized<c10::BFloat16>::loadu(p, Vectorized<T>::size()));
    return lo;
  }
}

/// The lane sums of four vectors, into out[0..3].
template <typename T>
inline void sum_lanes4(const Vectorized<T>* v, T* out) {
#if defined(CPU_CAPABILITY_AVX512)
  if constexpr (std::is_same_v<T, float>) {
    // Within each 128-bit lane: (a0+a2, b0+b2, a1+a3, b1+b3), then (a, b, c, d); then add the four lanes.
    const __m512 a = v[0], b = v[1], c = v[2], d = v[3];
    const __m512d ab = _mm512_castps_pd(_mm512_add_ps(_mm512_unpacklo_ps(a, b), _mm512_unpackhi_ps(a, b)));
    const __m512d cd = _mm512_castps_pd(_mm512_add_ps(_mm512_unpacklo_ps(c, d), _mm512_unpackhi_ps(c, d)));
    const __m512 abcd = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(ab, cd)),
                                      _mm512_castpd_ps(_mm512_unpackhi_pd(ab, cd)));
    const __m256 half = _mm256_add_ps(_mm512_castps512_ps256(abcd),
                                      _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(abcd), 1)));
    _mm_storeu_ps(out, _mm_add_ps(_mm256_castps256_ps128(half), _mm256_extractf128_ps(half, 1)));
    return;
  }
#elif defined(CPU_CAPABILITY_AVX2)
  if constexpr (std::is_same_v<T, float>) {
    const __m256 ab = _mm256_hadd_ps(v[0], v[1]), cd = _mm256_hadd_ps(v[2], v[3]);
    const __m256 abcd = _mm256_hadd_ps(ab, cd);  // per 128-bit lane: a, b, c, d
    _mm_storeu_ps(out, _mm_add_ps(_mm256_castps256_ps128(abcd), _mm256_extractf128_ps(abcd, 1)));
    return;
  }
#endif
  for (int i = 0; i < 4; ++i) out[i] = at::vec::vec_reduce_all<T>(std::plus<Vectorized<T>>(), v[i]);
}

/// Every step-th row of `rows`: row c is rows[c · step].
template <typename Rows>
struct EveryNth {
  Rows rows;
  int64_t step;
  auto operator[](int64_t c) const { return rows[c * step]; }
};

/// s[r · lds + c · col_step] = scale · q_r · k_c for R packed query rows (q, stride dk) and K keys (k[0] ..
/// k[K - 1]).
template <int R, int K, typename T, typename Rows>
void score_tile(const T* q, const Rows& k, int64_t dk, T scale, T* s, int64_t lds, int64_t col_step = 1) {
  using Vec = Vectorized<T>;
  constexpr int64_t W = Vec::size();
  Vec acc[R * K];
  for (Vec& a : acc) a = Vec(T(0));
  int64_t e = 0;
  for (; e + 2 * W <= dk; e += 2 * W) {
    Vec k0[K], k1[K];
    for (int c = 0; c < K; ++c) load_two<T>(k[c] + e, k0[c], k1[c]);
    for (int r = 0; r < R; ++r) {
      const Vec q0 = Vec::loadu(q + r * dk + e), q1 = Vec::loadu(q + r * dk + e + W);
      for (int c = 0; c < K; ++c) acc[r * K + c] = at::vec::fmadd(q1, k1[c], at::vec::fmadd(q0, k0[c], acc[r * K + c]));
    }
  }
  for (; e + W <= dk; e += W) {
    Vec k0[K];
    for (int c = 0; c < K; ++c) k0[c] = load_one<T>(k[c] + e);
    for (int r = 0; r < R; ++r) {
      const Vec q0 = Vec::loadu(q + r * dk + e);
      for (int c = 0; c < K; ++c) acc[r * K + c] = at::vec::fmadd(q0, k0[c], acc[r * K + c]);
    }
  }
  T sum[R * K];
  int i = 0;
  for (; i + 4 <= R * K; i += 4) sum_lanes4(acc + i, sum + i);
  for (; i < R * K; ++i) sum[i] = at::vec::vec_reduce_all<T>(std::plus<Vec>(), acc[i]);
  for (; e < dk; ++e) {
    for (int r = 0; r < R; ++r) {
      for (int c = 0; c < K; ++c) sum[r * K + c] += q[r * dk + e] * static_cast<T>(k[c][e]);
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int c = 0; c < K; ++c) s[r * lds + c * col_step] = scale * sum[r * K + c];
  }
}

/// out_r += Σ_{c < n} w[r · ldw + c] · v_c for R rows (out, stride dv) over n value rows (v[0] .. v[n - 1]).
/// Every weight is multiplied in, zeros too: the caller keeps blocked keys out of [0, n).
template <int R, typename T, typename Rows>
void weighted_sum_tile(const T* w, int64_t ldw, int64_t n, const Rows& v, int64_t dv, T* out) {
  using Vec = Vectorized<T>;
  constexpr int64_t W = Vec::size();
  constexpr int C = kValueVectors;
  int64_t e = 0;
  // One chunk of C vectors of every row's output stays in registers for the sweep over the n value rows,
  // which are read from L1/L2 after the first chunk's pass.
  for (; e + C * W <= dv; e += C * W) {
    Vec acc[R][C];
    for (auto& row : acc) {
      for (Vec& a : row) a = Vec(T(0));
    }
    for (int64_t c = 0; c < n; ++c) {
      Vec x[C];
      for (int j = 0; j < C; j += 2) load_two<T>(v[c] + e + j * W, x[j], x[j + 1]);
      for (int r = 0; r < R; ++r) {
        const Vec wr(w[r * ldw + c]);
        for (int j = 0; j < C; ++j) acc[r][j] = at::vec::fmadd(wr, x[j], acc[r][j]);
      }
    }
    for (int r = 0; r < R; ++r) {
      for (int j = 0; j < C; ++j) (Vec::loadu(out + r * dv + e + j * W) + acc[r][j]).store(out + r * dv + e + j * W);
    }
  }
  for (; e + W <= dv; e += W) {
    Vec acc[R];
    for (Vec& a : acc) a = Vec(T(0));
    for (int64_t c = 0; c < n; ++c) {
      const Vec x = load_one<T>(v[c] + e);
      for (int r = 0; r < R; ++r) acc[r] = at::vec::fmadd(Vec(w[r * ldw + c]), x, acc[r]);
    }
    for (int r = 0; r < R; ++r) (Vec::loadu(out + r * dv + e) + acc[r]).store(out + r * dv + e);
  }
  for (; e < dv; ++e) {
    for (int r = 0; r < R; ++r) {
      T sum = 0;
      for (int64_t c = 0; c < n; ++c) sum += w[r * ldw + c] * static_cast<T>(v[c][e]);
      out[r * dv + e] += sum;
    }
  }
}

}  // namespace attn::ops::cpu::ATTN_KERNEL_NAMESPACE
