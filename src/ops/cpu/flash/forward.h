#pragma once
// The fused forward pass (FlashAttention-2's scheme), for any product route. Each task takes one block of
// query rows of one (batch, head) and walks the key blocks. Per tile: S = scale·Q·Kᵀ, the score terms and
// masks on S, an online softmax that rescales the running output, and O += P·V. Only the tile, the output
// accumulator and two numbers per row live in memory, never [Tq, Tk]. The log-sum-exp per row is returned for
// the backward pass. Compiled once per instruction set.

#include "ops/cpu/flash/plan.h"
#include "ops/cpu/flash/problem.h"
#include "ops/cpu/flash/tasks.h"
#include "ops/cpu/flash/tile_masks.h"
#include "ops/cpu/math/rows.h"
#include "ops/cpu/products/cache_line_vector.h"
#include "ops/cpu/products/flash_products.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace attn::ops::cpu::ATTN_KERNEL_NAMESPACE {

/// Rows of a score tile that get their score terms and masks together, just before their softmax.
inline constexpr int64_t kRowChunk = 8;

/// How far a tile's scores may rise above the row maximum of the tiles before it (or its seed, below) and still
/// be shifted by that maximum (a stale shift): weights up to e^8, well within float and bfloat16, for no pass over
/// the tile to find its maxima first and no rescale of the row. A row whose scores rise further is shifted again
/// by its own peak.
inline constexpr float kStaleShiftSlack = 8.0f;

/// The scores of a row that stand in for its maximum where it has none yet: the first kSeedColumns, a real score,
/// so never above the row's peak, found without a pass over the row.
inline constexpr int64_t kSeedColumns = 16;

/// Rows without a maximum yet (-inf) take scale · the largest of their first kSeedColumns scores as one, for a
/// stale shift. Returns false, with row_max untouched, where such a row's first scores are not all numbers.
/// rows <= kRows, the tile's.
template <int64_t kRows, typename T>
bool seed_row_maxima(const T* s, int64_t lds, int64_t rows, int64_t cols, T scale, T* row_max) {
  T seeds[kRows];
  const int64_t n = std::min(kSeedColumns, cols);
  for (int64_t r = 0; r < rows; ++r) {
    seeds[r] = row_max[r];
    if (row_max[r] != kNegInf<T>) continue;
    T top = kNegInf<T>;
    for (int64_t c = 0; c < n; ++c) {
      const T x = s[r * lds + c];
      if (!std::isfinite(x)) return false;
      top = std::max(top, x);
    }
    seeds[r] = scale * top;
    if (!std::isfinite(seeds[r])) return false;
  }
  std::copy(seeds, seeds + rows, row_max);
  return true;
}

/// A row whose maximum rose: its running sum and output scaled by rescale = exp(old max - new max).
template <typename T>
void rescale_row(T& row_sum, T* out, int64_t dv, T rescale) {
  row_sum *= rescale;
  if (rescale == T(1)) return;
  for (int64_t c = 0; c < dv; ++c) out[c] *= rescale;
}

template <typename T, typename Products>
struct ForwardState {
  CacheLineVector<T> scores, acc;  // a tile's scores and its rows' outputs, read 64 bytes at a time
  std::vector<T> row_max, row_sum;
  std::vector<float> lane_max;  // row maxima of the tile from its product, kRowMaxLanes a row
  typename Products::Scratch scratch;
};

template <typename T, typename In, typename Products>
void forward(const FlashForward<T, In>& args, const Products& products) {
  const FlashProblem<T, In>& p = args.problem;
  const bool masked = has_masks(p);
  const std::vector<Sequence> seqs = sequences_of(p);
  const std::vector<uint8_t> values_finite = finite_blocks(p, p.v, p.dv, kKeyBlock);
  constexpr int64_t kRows = TileQueryRows<Products>::forward;
  constexpr int64_t kScoreStride = ScoreTileStride<Products>::value;
  const std::vector<QueryBlock> blocks = query_blocks(p, seqs, kRows);

  using State = ForwardState<T, Products>;
  run_tasks<State>(static_cast<int64_t>(blocks.size()) * p.heads, [&](int64_t t, State& st) {
    const BlockOfHead task = forward_task(t, static_cast<int64_t>(blocks.size()), p.heads);
    const QueryBlock& blk = blocks[task.block];
    const Sequence& sq = seqs[blk.sequence];
    const int64_t h = task.head, b = sq.b, i0 = blk.i0, rows = blk.rows;
    st.scores.resize(kRows * kScoreStride);
    st.acc.assign(rows * p.dv, T(0));
    // A sink starts every row's softmax: max = sink, sum = exp(sink - sink) = 1, no value behind it.
    const T sink = p.sinks ? p.sinks[h] : kNegInf<T>;
    const bool has_sink = sink != kNegInf<T>;
    st.row_max.assign(rows, sink);
    st.row_sum.assign(rows, has_sink ? T(1) : T(0));
    T* s = st.scores.data();
    T* acc = st.acc.data();
    if (Products::kRowMaxima) st.lane_max.resize(kRows * kRowMaxLanes);

    // Keys outside the band of every row of the block are skipped entirely.
    const auto [key_begin, key_end] = key_range(p, sq, i0, rows);
    const int64_t hk = p.kv_head(h);
    for (int64_t j0 = key_begin; j0 < key_end; j0 += kKeyBlock) {
      const int64_t cols = std::min(kKeyBlock, key_end - j0);
      const TileAt at{b, h, hk, sq.q0 + i0, rows, sq.k0 + j0, cols};
      const bool mask = masked || tile_leaves_band(p, sq, i0, rows, j0, cols);
      const bool plain = plain_tile(p, mask);
      float* lane_max = plain && Products::kRowMaxima ? st.lane_max.data() : nullptr;
      const bool values_finite_here = rows_finite(p, values_finite, kKeyBlock, b, hk, at.j, cols);
      // A plain tile is shifted by its rows' maxima so far, or where a row has none yet by a seed from its first
      // scores, and its exp finds the tile's own peak (a stale shift). Not where a maximum so far is NaN or +inf.
      const bool stale_shift =
          UnscaledScores<Products>::value && plain && values_finite_here && p.scale > T(0) &&
          std::all_of(st.row_max.begin(), st.row_max.end(), [](T m) { return std::isfinite(m) || m == kNegInf<T>; });
      if constexpr (UnscaledScores<Products>::value) {
        if (stale_shift) products.unscaled_scores(st.scratch, at, s, kScoreStride);
        // A row whose first scores are not all numbers takes the tile's product again, the usual way below.
        if (stale_shift && seed_row_maxima<kRows>(s, kScoreStride, rows, cols, T(p.scale), st.row_max.data())) {
          for (int64_t r = 0; r < rows; ++r) {
            T* row = s + r * kScoreStride;
            float peak;
            T tile_sum = products.exp_sum(st.scratch, r, row, cols, st.row_max[r], true, &peak);
            // Not taken for a NaN peak: the NaN is in the sum already.
            if (peak > st.row_max[r] + kStaleShiftSlack) {
              const T rescale = std::exp(st.row_max[r] - peak);
              st.row_max[r] = peak;
              tile_sum = products.exp_sum(st.scratch, r, row, cols, peak, true);
              rescale_row(st.row_sum[r], acc + r * p.dv, p.dv, rescale);
            }
            st.row_sum[r] += tile_sum;
          }
          products.add_values(st.scratch, at, s, kScoreStride, acc, p.dv);
          continue;
        }
      }
      products.scores(st.scratch, at, s, kScoreStride, lane_max);

      for (int64_t r0 = 0; r0 < rows; r0 += kRowChunk) {
        const int64_t chunk = std::min(kRowChunk, rows - r0);
        // The score terms and masks a few rows at a time, so the softmax below reads them from L1.
        T* chunk_scores = s + r0 * kScoreStride;
        score_terms(p, sq, h, i0 + r0, chunk, j0, cols, chunk_scores, kScoreStride, static_cast<T*>(nullptr));
        if (mask) mask_tile(p, sq, h, i0 + r0, chunk, j0, cols, chunk_scores, kScoreStride);
        // The chunk's new maxima first, then its exp passes, which then follow one another without each
        // waiting on its row's reduction.
        T rescales[kRowChunk];
        for (int64_t r = r0; r < r0 + chunk; ++r) {
          T* row = s + r * kScoreStride;
          // -inf from the lanes means no number there (all NaN or -inf): the pass decides.
          T tile_max = lane_max ? static_cast<T>(lanes_max(lane_max + r * kRowMaxLanes)) : kNegInf<T>;
          if (tile_max == kNegInf<T>) tile_max = row_max(row, cols);
          const T old_max = st.row_max[r];
          const T new_max = (std::isnan(tile_max) || tile_max > old_max) ? tile_max : old_max;
          rescales[r - r0] = std::exp(old_max - new_max);  // 0 on the first allowed tile
          st.row_max[r] = new_max;
        }
        for (int64_t r = r0; r < r0 + chunk; ++r) {
          T* row = s + r * kScoreStride;
          if (st.row_max[r] == kNegInf<T>) {  // no key allowed for this row yet
            products.no_keys_yet(st.scratch, r, row, cols);
            continue;
          }
          const T tile_sum = products.exp_sum(st.scratch, r, row, cols, st.row_max[r], values_finite_here);
          rescale_row(st.row_sum[r], acc + r * p.dv, p.dv, rescales[r - r0]);
          st.row_sum[r] += tile_sum;
        }
      }

      if (values_finite_here) {
        products.add_values(st.scratch, at, s, kScoreStride, acc, p.dv);
      } else {
        // 0 · Inf is NaN in a matrix product: add up only the keys with a nonzero weight.
        const In* v = p.v.row(b, hk, at.j);
        for (int64_t r = 0; r < rows; ++r) {
          for (int64_t c = 0; c < cols; ++c) {
            const T w = s[r * kScoreStride + c];
            if (w == T(0)) continue;
            const In* vrow = v + c * p.v.si;
            for (int64_t e = 0; e < p.dv; ++e) acc[r * p.dv + e] += w * static_cast<T>(vrow[e]);
          }
        }
      }
    }

    for (int64_t r = 0; r < rows; ++r) {
      In* out = args.out.row(b, h, sq.q0 + i0 + r);
      T& lse = args.lse[(b * p.heads + h) * p.tq + sq.q0 + i0 + r];
      const T sum = st.row_sum[r];
      if (sum == T(0)) {  // every key blocked: zeros, as FlashAttention and SDPA give
        std::fill(out, out + p.dv, In(0));
        lse = kNegInf<T>;
        continue;
      }
      // With a sink and no allowed key, acc is 0 and sum 1: a zero row, and lse = the sink.
      const T inv = T(1) / sum;
      for (int64_t c = 0; c < p.dv; ++c) out[c] = static_cast<In>(acc[r * p.dv + c] * inv);
      lse = st.row_max[r] + std::log(sum);
    }
  });
}

}  // namespace attn::ops::cpu::ATTN_KERNEL_NAMESPACE
