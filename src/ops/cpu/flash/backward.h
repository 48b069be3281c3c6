#pragma once
// The fused backward pass, for any product route. First each query row's delta = rowsum(dO · O). Then each task
// takes a range of key blocks of one (sequence, kv head), recomputes P = exp(S - lse) tile by tile for every
// query head of the group, and accumulates dK and dV in its own buffer; dQ goes to a per-split slice, so tasks
// never write the same row. Last, the slices are summed. Every gradient is written in the inputs' element type,
// rounded once from its float sum. Compiled once per instruction set.

#include "ops/cpu/flash/plan.h"
#include "ops/cpu/flash/problem.h"
#include "ops/cpu/flash/tasks.h"
#include "ops/cpu/flash/tile_masks.h"
#include "ops/cpu/math/rows.h"
#include "ops/cpu/math/score_terms.h"
#include "ops/cpu/products/cache_line_vector.h"
#include "ops/cpu/products/flash_products.h"
#include "ops/cpu/products/row_tiles.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <vector>

namespace attn::ops::cpu::ATTN_KERNEL_NAMESPACE {

template <typename T, typename Products>
struct BackwardState {
  CacheLineVector<T> probs, grad_probs, tanh_values, grad_k, grad_v;
  typename Products::Scratch scratch;
};

/// Rows per task of the row passes around the tiles (delta, the dQ slices' sum): a few thousand elements each.
inline constexpr int64_t kRowPassGrain = 64;

/// delta[b, h, i] = Σ_c dO[b, h, i, c] · O[b, h, i, c] in T, bfloat16 widened exactly: the softmax backward's row
/// term (Σ_j P·dP, O(T) to compute from the output).
template <typename T, typename In>
void write_row_deltas(const FlashBackward<T, In>& args) {
  const FlashProblem<T, In>& p = args.problem;
  using Vec = Vectorized<T>;
  at::parallel_for(0, p.batch * p.heads * p.tq, kRowPassGrain, [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      const int64_t i = row % p.tq, h = (row / p.tq) % p.heads, b = row / (p.tq * p.heads);
      const In* dout = args.grad_out.row(b, h, i);
      const In* out = args.out.row(b, h, i);
      Vec acc(T(0));
      int64_t c = 0;
      for (; c + Vec::size() <= p.dv; c += Vec::size()) {
        acc = at::vec::fmadd(load_one<T>(dout + c), load_one<T>(out + c), acc);
      }
      T sum = at::vec::vec_reduce_all<T>(std::plus<Vec>(), acc);
      for (; c < p.dv; ++c) sum += static_cast<T>(dout[c]) * static_cast<T>(out[c]);
      args.delta[row] = sum;
    }
  });
}

/// dQ = the sum of the splits' slices, in split order (so the same whatever the thread count), rounded to In.
template <typename T, typename In>
void sum_query_splits(const FlashBackward<T, In>& args) {
  const FlashProblem<T, In>& p = args.problem;
  if (static_cast<const void*>(args.grad_q.data) == static_cast<const void*>(args.grad_q_splits.data)) {
    return;  // one split, in dQ's own type: the tasks wrote dQ itself
  }
  const int64_t rows = p.batch * p.heads * p.tq;
  at::parallel_for(0, rows, kRowPassGrain, [&](int64_t begin, int64_t end) {
    std::vector<T> sum(p.dk);
    for (int64_t row = begin; row < end; ++row) {
      const int64_t i = row % p.tq, h = (row / p.tq) % p.heads, b = row / (p.tq * p.heads);
      const T* first = args.grad_q_splits.row(b, h, i);
      std::copy_n(first, p.dk, sum.data());
      for (int64_t split = 1; split < args.splits; ++split) {
        const T* slice = args.grad_q_splits.row(split * p.batch + b, h, i);
        for (int64_t e = 0; e < p.dk; ++e) sum[e] += slice[e];
      }
      std::copy_n(sum.data(), p.dk, args.grad_q.row(b, h, i));
    }
  });
}

template <typename T, typename In, typename Products>
void backward(const FlashBackward<T, In>& args, const Products& products) {
  const FlashProblem<T, In>& p = args.problem;
  write_row_deltas(args);
  const bool masked = has_masks(p);
  const bool capped = p.softcap > T(0);
  const int64_t ld = kBackwardKeyBlock;
  constexpr int64_t kRows = TileQueryRows<Products>::backward;
  const std::vector<Sequence> seqs = sequences_of(p);
  const std::vector<uint8_t> keys_finite_blocks = finite_blocks(p, p.k, p.dk, kBackwardKeyBlock);
  // One task per (sequence, kv head, split): it walks every query head of the group, so dK and dV of a shared
  // head are summed over its group in the task's accumulator, in a fixed order. Sequences never share query
  // rows, so the tasks of different sequences may write the same dQ slice.
  const std::vector<KeyTask> tasks = key_tasks(p, seqs, args.splits);

  using State = BackwardState<T, Products>;
  run_tasks<State>(static_cast<int64_t>(tasks.size()) * p.kv_heads, [&](int64_t t, State& st) {
    const KeyTask& task = tasks[t / p.kv_heads];
    const Sequence& sq = seqs[task.sequence];
    const int64_t split = task.split, hk = t % p.kv_heads, b = sq.b;
    const int64_t k_blocks = (sq.tk + kBackwardKeyBlock - 1) / kBackwardKeyBlock;
    const int64_t kb_begin = split * k_blocks / args.splits, kb_end = (split + 1) * k_blocks / args.splits;
    st.probs.resize(kRows * ld);
    st.grad_probs.resize(kRows * ld);
    if (capped) st.tanh_values.resize(kRows * ld);
    T* prob = st.probs.data();
    T* dprob = st.grad_probs.data();
    T* tanh_values = capped ? st.tanh_values.data() : nullptr;

    for (int64_t kb = kb_begin; kb < kb_end; ++kb) {
      const int64_t j0 = kb * kBackwardKeyBlock, cols = std::min(kBackwardKeyBlock, sq.tk - j0);
      st.grad_k.assign(cols * p.dk, T(0));
      st.grad_v.assign(cols * p.dv, T(0));
      const bool keys_finite = rows_finite(p, keys_finite_blocks, kBackwardKeyBlock, b, hk, sq.k0 + j0, cols);
      products.key_block(st.scratch, TileAt{b, 0, hk, 0, 0, sq.k0 + j0, cols}, keys_finite);
      // Only the queries whose band reaches the tile's keys.
      const auto [q_begin, q_end] = query_range(p, sq, j0, cols);
      for (int64_t h = hk * p.group(); h < (hk + 1) * p.group(); ++h) {
        const T* lse = args.lse + (b * p.heads + h) * p.tq + sq.q0;
        const T* delta = args.delta + (b * p.heads + h) * p.tq + sq.q0;
        for (int64_t i0 = q_begin; i0 < q_end; i0 += kRows) {
          const int64_t rows = std::min(kRows, q_end - i0);
          const TileAt at{b, h, hk, sq.q0 + i0, rows, sq.k0 + j0, cols};
          const bool mask = masked || tile_leaves_band(p, sq, i0, rows, j0, cols);
          const bool unscaled = UnscaledScores<Products>::value && plain_tile(p, mask);
          if constexpr (UnscaledScores<Products>::value) {
            if (unscaled) products.unscaled_scores(st.scratch, at, prob, ld);
            else products.scores(st.scratch, at, prob, ld, nullptr);
          } else {
            products.scores(st.scratch, at, prob, ld, nullptr);
          }
          score_terms(p, sq, h, i0, rows, j0, cols, prob, ld, tanh_values);
          if (mask) mask_tile(p, sq, h, i0, rows, j0, cols, prob, ld);
          for (int64_t r = 0; r < rows; ++r) {
            T* row = prob + r * ld;
            if (lse[i0 + r] == kNegInf<T>) {
              std::fill(row, row + cols, T(0));
            } else {
              const T scale = unscaled ? p.scale : T(1);
              if constexpr (OwnProbabilities<Products>::value) products.probabilities(row, cols, lse[i0 + r], scale);
              else exp_shifted(row, cols, lse[i0 + r], scale);
            }
          }
          // dV += Pᵀ dO;  dP = dO Vᵀ;  dS = P (dP - delta);  dK += scale dSᵀ Q;  dQ += scale dS K. A route that forms
          // dS itself rounds Pᵀ in that pass: its dV after it.
          constexpr bool kGradValuesAfterGradScores = OwnGradScores<Products>::value;
          if (!kGradValuesAfterGradScores) products.add_grad_values(st.scratch, at, prob, ld, st.grad_v.data(), p.dv);
          products.grad_probs(st.scratch, at, dprob, ld);
          bool own_grad_scores = false;
          if constexpr (OwnGradScores<Products>::value) {
            own_grad_scores =
                !capped && keys_finite && products.grad_scores(st.scratch, at, prob, dprob, ld, delta + i0);
          }
          if (!own_grad_scores) {
            for (int64_t r = 0; r < rows; ++r) softmax_backward_row(prob + r * ld, dprob + r * ld, cols, delta[i0 + r]);
          }
          // Through the soft-cap: d(cap · tanh(s / cap)) / ds = 1 - tanh².
          if (capped) {
            for (int64_t r = 0; r < rows; ++r) softcap_backward_row(dprob + r * ld, tanh_values + r * ld, cols);
          }
          if (kGradValuesAfterGradScores) products.add_grad_values(st.scratch, at, prob, ld, st.grad_v.data(), p.dv);
          products.add_grad_keys(st.scratch, at, dprob, ld, st.grad_k.data(), p.dk);
          T* dq = args.grad_q_splits.row(split * p.batch + b, h, sq.q0 + i0);
          if (keys_finite) {
            products.add_grad_queries(st.scratch, at, dprob, ld, dq, args.grad_q_splits.si);
          } else {
            // A NaN or Inf key at a blocked pair has dS = 0 there, and 0 · NaN would still poison dQ.
            const In* k = p.k.row(b, hk, at.j);
            for (int64_t r = 0; r < rows; ++r) {
              for (int64_t c = 0; c < cols; ++c) {
                const T w = dprob[r * ld + c] * p.scale;
                if (w == T(0)) continue;
                const In* krow = k + c * p.k.si;
                for (int64_t e = 0; e < p.dk; ++e) dq[r * args.grad_q_splits.si + e] += w * static_cast<T>(krow[e]);
              }
            }
          }
        }
      }
      // Rounded to In (bfloat16 to nearest even, as Tensor::to) as they are written.
      for (int64_t c = 0; c < cols; ++c) {
        std::copy_n(st.grad_k.data() + c * p.dk, p.dk, args.grad_k.row(b, hk, sq.k0 + j0 + c));
        std::copy_n(st.grad_v.data() + c * p.dv, p.dv, args.grad_v.row(b, hk, sq.k0 + j0 + c));
      }
    }
  });
  sum_query_splits(args);
}

}  // namespace attn::ops::cpu::ATTN_KERNEL_NAMESPACE
