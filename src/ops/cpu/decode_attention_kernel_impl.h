// The decode kernel (split-KV, FlashDecoding's scheme), compiled once per instruction set like the fused
// kernels: the variant files include it after flash_attention_kernel_impl.h, whose helpers (row_max,
// exp_shifted_sum, run_tasks, kNegInf) it shares. No include guard on purpose.
//
// Decoding reads the whole cache for a few FLOPs per element, so it is bound by memory bandwidth. Each task
// takes one split of kDecodeKeyBlock keys of one (batch row, K/V head) and computes, for every query row of
// the heads that share that K/V head (group × Tq rows, packed into one tile so each K/V element is read once
// per group), the split's running max, sum and unnormalised output. A second pass merges the splits of each
// (row, K/V head) with their log-sum-exp, in split order. Splits are fixed by the length, so every thread
// count gives the same bits, and B × H_kv smaller than the thread count still keeps every core busy.

#ifndef ATTN_KERNEL_NAMESPACE
#error "define ATTN_KERNEL_NAMESPACE before including decode_attention_kernel_impl.h"
#endif

#include "ops/cpu/flash_attention_kernel.h"

#include <ATen/Parallel.h>
#include <ATen/cpu/vec/functional.h>
#include <ATen/cpu/vec/vec.h>

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

namespace attn::ops::cpu::ATTN_KERNEL_NAMESPACE {
namespace {

/// The end of the keys query t of row b may attend: the cache rule of DecodeArgs (and of backends/masks.h).
inline int64_t key_limit(int64_t key_length, int64_t query_start, int64_t t, bool causal) {
  return causal ? std::clamp<int64_t>(query_start + t + 1, 0, key_length) : key_length;
}

/// One cache row in the compute type: the row itself, or converted into `scratch` (bfloat16 -> float32).
template <typename T, typename KV>
const T* row_in(const KV* src, int64_t n, T* scratch) {
  if constexpr (std::is_same_v<T, KV>) {
    return src;
  } else {
    at::vec::convert(src, scratch, n);
    return scratch;
  }
}

/// Σ a[i]·b[i], two accumulators to hide the FMA latency.
template <typename T>
T dot(const T* a, const T* b, int64_t n) {
  using Vec = Vectorized<T>;
  Vec acc0(T(0)), acc1(T(0));
  int64_t i = 0;
  for (; i + 2 * Vec::size() <= n; i += 2 * Vec::size()) {
    acc0 = at::vec::fmadd(Vec::loadu(a + i), Vec::loadu(b + i), acc0);
    acc1 = at::vec::fmadd(Vec::loadu(a + i + Vec::size()), Vec::loadu(b + i + Vec::size()), acc1);
  }
  for (; i + Vec::size() <= n; i += Vec::size()) acc0 = at::vec::fmadd(Vec::loadu(a + i), Vec::loadu(b + i), acc0);
  T sum = at::vec::vec_reduce_all<T>(std::plus<Vec>(), acc0 + acc1);
  for (; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

/// y += alpha · x.
template <typename T>
void axpy(T alpha, const T* x, T* y, int64_t n) {
  using Vec = Vectorized<T>;
  const Vec va(alpha);
  int64_t i = 0;
  for (; i + Vec::size() <= n; i += Vec::size()) at::vec::fmadd(va, Vec::loadu(x + i), Vec::loadu(y + i)).store(y + i);
  for (; i < n; ++i) y[i] += alpha * x[i];
}

template <typename T>
struct DecodeState {
  std::vector<T> q, scores, row;
};

template <typename T, typename KV>
void decode(const DecodeArgs<T, KV>& a) {
  const int64_t group = a.heads / a.kv_heads, rows = group * a.tq;
  // Row b's splits are [first_split[b], first_split[b + 1]); a row with no key still has one (empty) split.
  std::vector<int64_t> first_split(a.batch + 1, 0);
  for (int64_t b = 0; b < a.batch; ++b) {
    const int64_t splits = std::max<int64_t>((a.key_lengths[b] + kDecodeKeyBlock - 1) / kDecodeKeyBlock, 1);
    first_split[b + 1] = first_split[b] + splits;
  }
  const int64_t total_splits = first_split[a.batch];
  // Per (split, K/V head): the rows' max and sum of exp over the split, and their unnormalised outputs.
  const int64_t slots = total_splits * a.kv_heads;
  std::vector<T> part_max(slots * rows), part_sum(slots * rows), part_out(slots * rows * a.dv);

  run_tasks<DecodeState<T>>(slots, [&](int64_t task, DecodeState<T>& st) {
    const int64_t split = task / a.kv_heads, hk = task % a.kv_heads;
    const int64_t b = std::upper_bound(first_split.begin(), first_split.end(), split) - first_split.begin() - 1;
    const int64_t j0 = (split - first_split[b]) * kDecodeKeyBlock;
    const int64_t cols = std::clamp<int64_t>(a.key_lengths[b] - j0, 0, kDecodeKeyBlock);
    T* m = part_max.data() + task * rows;
    T* l = part_sum.data() + task * rows;
    T* acc = part_out.data() + task * rows * a.dv;

    // The group's query rows, packed: row r = i * Tq + t is query t of head hk * group + i.
    st.q.resize(rows * a.dk);
    for (int64_t i = 0; i < group; ++i) {
      for (int64_t t = 0; t < a.tq; ++t) {
        std::copy_n(a.q.row(b, hk * group + i, t), a.dk, st.q.data() + (i * a.tq + t) * a.dk);
      }
    }
    // Each K and V row is read once, from memory, and used by every packed query row while it is in L1:
    // decoding is bound by that read, and a GEMM of a few rows would stream the tile through its packing.
    st.row.resize(std::max(a.dk, a.dv));
    const int64_t lds = std::max<int64_t>(cols, 1);
    st.scores.resize(rows * lds);
    T* s = st.scores.data();
    for (int64_t c = 0; c < cols; ++c) {
      const T* k = row_in<T>(a.k.row(b, hk, j0 + c), a.dk, st.row.data());
      for (int64_t r = 0; r < rows; ++r) s[r * lds + c] = a.scale * dot(st.q.data() + r * a.dk, k, a.dk);
    }

    for (int64_t r = 0; r < rows; ++r) {
      const int64_t limit = key_limit(a.key_lengths[b], a.query_starts[b], r % a.tq, a.causal);
      const int64_t allowed = std::clamp<int64_t>(limit - j0, 0, cols);
      T* row = s + r * lds;
      std::fill(row + allowed, row + cols, kNegInf<T>);
      m[r] = allowed > 0 ? row_max(row, cols) : kNegInf<T>;
      if (m[r] == kNegInf<T>) {  // no key of this split is allowed for this row
        std::fill(row, row + cols, T(0));
        l[r] = T(0);
      } else {
        l[r] = exp_shifted_sum(row, cols, m[r]);
      }
    }

    // A weight of exactly 0 (a blocked key) is skipped, so a NaN or Inf value there contributes nothing.
    std::fill(acc, acc + rows * a.dv, T(0));
    for (int64_t c = 0; c < cols; ++c) {
      const T* v = row_in<T>(a.v.row(b, hk, j0 + c), a.dv, st.row.data());
      for (int64_t r = 0; r < rows; ++r) {
        const T w = s[r * lds + c];
        if (w != T(0)) axpy(w, v, acc + r * a.dv, a.dv);
      }
    }
  });

  // Merge each (row, K/V head)'s splits in order: out = Σ e^(m_s - M) acc_s / Σ e^(m_s - M) l_s.
  at::parallel_for(0, a.batch * a.kv_heads, 1, [&](int64_t begin, int64_t end) {
    std::vector<T> out(a.dv);
    for (int64_t bh = begin; bh < end; ++bh) {
      const int64_t b = bh / a.kv_heads, hk = bh % a.kv_heads;
      for (int64_t r = 0; r < rows; ++r) {
        T max = kNegInf<T>;
        for (int64_t sp = first_split[b]; sp < first_split[b + 1]; ++sp) {
          const T ms = part_max[(sp * a.kv_heads + hk) * rows + r];
          if (std::isnan(ms) || ms > max) max = ms;
          if (std::isnan(max)) break;
        }
        T* dst = a.out.row(b, hk * group + r / a.tq, r % a.tq);
        if (max == kNegInf<T>) {  // every key blocked: a zero row, as the other backends give
          std::fill(dst, dst + a.dv, T(0));
          continue;
        }
        T denom = 0;
        std::fill(out.begin(), out.end(), T(0));
        for (int64_t sp = first_split[b]; sp < first_split[b + 1]; ++sp) {
          const int64_t slot = sp * a.kv_heads + hk;
          const T ms = part_max[slot * rows + r];
          if (ms == kNegInf<T>) continue;
          const T w = std::exp(ms - max);
          denom += w * part_sum[slot * rows + r];
          const T* src = part_out.data() + (slot * rows + r) * a.dv;
          for (int64_t e = 0; e < a.dv; ++e) out[e] += w * src[e];
        }
        const T inv = T(1) / denom;
        for (int64_t e = 0; e < a.dv; ++e) dst[e] = out[e] * inv;
      }
    }
  });
}

}  // namespace

void decode_forward(const DecodeArgs<float, float>& args) { decode(args); }
void decode_forward(const DecodeArgs<double, double>& args) { decode(args); }
void decode_forward(const DecodeArgs<float, c10::BFloat16>& args) { decode(args); }

}  // namespace attn::ops::cpu::ATTN_KERNEL_NAMESPACE
