#pragma once
// How the fused kernels cut a problem into work: its sequences (batch rows, or packed sequences), the keys a
// block of queries may see under the band (and the queries a block of keys may be seen by), the tasks in
// the order they run, and which key blocks hold only finite numbers. Compiled once per instruction set.

#include "ops/cpu/flash/problem.h"
#include "ops/cpu/math/rows.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <utility>
#include <vector>

namespace attn::ops::cpu::ATTN_KERNEL_NAMESPACE {

/// Query rows of a pass's tile: kQueryBlock forward and kBackwardQueryBlock backward, unless the route has rows of
/// its own (Products::kQueryRows: the AMX route, whose types serve one pass each).
template <typename Products, typename = void>
struct TileQueryRows {
  static constexpr int64_t forward = kQueryBlock, backward = kBackwardQueryBlock;
};
template <typename Products>
struct TileQueryRows<Products, std::void_t<decltype(Products::kQueryRows)>> {
  static constexpr int64_t forward = Products::kQueryRows, backward = Products::kQueryRows;
};

/// The forward score tile's row stride: kKeyBlock, plus the route's padding (Products::kScorePadding: the AMX
/// route's, whose tile stores into 2 KB-strided rows put a tile's 16 rows in two of L1's sets, where they evict
/// one another; the float routes measured no gain from it, bench/RESULTS.md).
template <typename Products, typename = void>
struct ScoreTileStride {
  static constexpr int64_t value = kKeyBlock;
};
template <typename Products>
struct ScoreTileStride<Products, std::void_t<decltype(Products::kScorePadding)>> {
  static constexpr int64_t value = kKeyBlock + Products::kScorePadding;
};

/// Whether a route can leave a plain tile's scores unscaled (Products::unscaled_scores(st, t, s, lds): S = Q·Kᵀ),
/// for the exp to scale them on its own pass: one pass over the tile fewer where no score term or mask needs them
/// scaled first (the AMX route's, both passes; forward, its exp_sum also gives the row's peak).
template <typename Products, typename = void>
struct UnscaledScores : std::false_type {};
template <typename Products>
struct UnscaledScores<Products, std::void_t<decltype(&Products::unscaled_scores)>> : std::true_type {};

/// Whether a route's backward forms P = exp(scale · s - lse) itself (Products::probabilities(row, cols, lse,
/// scale)), to the precision its products keep (the AMX route's, to bfloat16's); exp_shifted's full float exp
/// otherwise.
template <typename Products, typename = void>
struct OwnProbabilities : std::false_type {};
template <typename Products>
struct OwnProbabilities<Products, std::void_t<decltype(&Products::probabilities)>> : std::true_type {};

/// Whether a route can form dS = P ⊙ (dP - delta) itself, for a tile without a soft-cap whose keys are finite
/// (Products::grad_scores(st, t, p, dp, ld, delta) -> bool; false: the tile's shape is not one it takes, and dS
/// goes the usual way), straight into the bfloat16 operands of its dK and dQ products, with Pᵀ's for dV in the
/// same pass (the AMX route's): no pass writes a float dS, and none reads dS or P back. Such a route's dV
/// product runs after dS.
template <typename Products, typename = void>
struct OwnGradScores : std::false_type {};
template <typename Products>
struct OwnGradScores<Products, std::void_t<decltype(&Products::grad_scores)>> : std::true_type {};

template <typename T, typename In>
bool has_masks(const FlashProblem<T, In>& p) {
  return p.key_padding.data != nullptr || p.attend.data != nullptr || p.additive.data != nullptr;
}

/// One sequence of the problem: a batch row, or one packed sequence of a batch row (cu_seqlens). Its query
/// rows q0 .. q0 + tq and key rows k0 .. k0 + tk, indexed locally from 0 by the tiles, with its own diagonal.
struct Sequence {
  int64_t b, id, q0, tq, k0, tk, offset;
};

template <typename T, typename In>
std::vector<Sequence> sequences_of(const FlashProblem<T, In>& p) {
  std::vector<Sequence> out;
  if (p.cu_seqlens_q) {
    for (int64_t s = 0; s < p.sequences; ++s) {
      const int64_t q0 = p.cu_seqlens_q[s], tq = p.cu_seqlens_q[s + 1] - q0;
      const int64_t k0 = p.cu_seqlens_k[s], tk = p.cu_seqlens_k[s + 1] - k0;
      out.push_back({0, s, q0, tq, k0, tk, tk - tq});  // bottom-right per sequence, as flash_attn_varlen_func
    }
  } else {
    for (int64_t b = 0; b < p.batch; ++b) out.push_back({b, b, 0, p.tq, 0, p.tk, p.causal_offset});
  }
  return out;
}

/// The keys [begin, end) that some query of rows [i0, i0 + rows) may see under the band.
template <typename T, typename In>
std::pair<int64_t, int64_t> key_range(const FlashProblem<T, In>& p, const Sequence& sq, int64_t i0, int64_t rows) {
  const int64_t right = p.right_bound();
  const int64_t begin = p.window_left >= 0 ? std::clamp<int64_t>(i0 + sq.offset - p.window_left, 0, sq.tk) : 0;
  const int64_t end = right >= 0 ? std::clamp<int64_t>(i0 + rows - 1 + sq.offset + right + 1, 0, sq.tk) : sq.tk;
  return {begin, std::max(begin, end)};
}

/// The queries [begin, end) that may see some key of [j0, j0 + cols) under the band.
template <typename T, typename In>
std::pair<int64_t, int64_t> query_range(const FlashProblem<T, In>& p, const Sequence& sq, int64_t j0, int64_t cols) {
  const int64_t right = p.right_bound();
  const int64_t begin = right >= 0 ? std::clamp<int64_t>(j0 - sq.offset - right, 0, sq.tq) : 0;
  const int64_t end =
      p.window_left >= 0 ? std::clamp<int64_t>(j0 + cols - 1 - sq.offset + p.window_left + 1, 0, sq.tq) : sq.tq;
  return {begin, std::max(begin, end)};
}

/// True when some pair of the tile lies outside the band, so the tile needs masking.
template <typename T, typename In>
bool tile_leaves_band(const FlashProblem<T, In>& p, const Sequence& sq, int64_t i0, int64_t rows, int64_t j0,
                      int64_t cols) {
  const int64_t right = p.right_bound();
  return (right >= 0 && j0 + cols - 1 > i0 + sq.offset + right) ||
         (p.window_left >= 0 && j0 < i0 + rows - 1 + sq.offset - p.window_left);
}

/// True when a tile's scores are the bare product: no mask (`mask`: the problem's or the band's) and no score
/// term (soft-cap, ALiBi). Such a tile may keep the row maxima its product gives (forward) or stay unscaled
/// for the exp to scale (backward).
template <typename T, typename In>
bool plain_tile(const FlashProblem<T, In>& p, bool mask) {
  return !mask && !(p.softcap > T(0)) && p.alibi == nullptr;
}

/// A block of query rows of one sequence, and how many keys it visits (its cost): the forward pass's task,
/// once per query head.
struct QueryBlock {
  int64_t sequence, i0, rows, cost;
};

/// The forward pass's query blocks of up to `block_rows` rows, the costliest first (under a causal mask, the last
/// ones), so that the run ends on short tasks.
template <typename T, typename In>
std::vector<QueryBlock> query_blocks(const FlashProblem<T, In>& p, const std::vector<Sequence>& seqs,
                                     int64_t block_rows) {
  std::vector<QueryBlock> blocks;
  for (int64_t s = 0; s < static_cast<int64_t>(seqs.size()); ++s) {
    for (int64_t i0 = 0; i0 < seqs[s].tq; i0 += block_rows) {
      const int64_t rows = std::min(block_rows, seqs[s].tq - i0);
      const auto [begin, end] = key_range(p, seqs[s], i0, rows);
      blocks.push_back({s, i0, rows, end - begin});
    }
  }
  std::stable_sort(blocks.begin(), blocks.end(),
                   [](const QueryBlock& a, const QueryBlock& b) { return a.cost > b.cost; });
  return blocks;
}

/// Forward task t's query block and head. The tasks go in groups of kHeadRunBlocks blocks (of similar cost, as
/// query_blocks sorts them), head by head within a group: the threads then take one head's blocks one after
/// another and read its keys and values from L2, instead of every task a new head's from L3.
inline constexpr int64_t kHeadRunBlocks = 32;
struct BlockOfHead {
  int64_t block, head;
};
inline BlockOfHead forward_task(int64_t t, int64_t blocks, int64_t heads) {
  const int64_t group = t / (kHeadRunBlocks * heads), first = group * kHeadRunBlocks;
  const int64_t in_group = std::min(kHeadRunBlocks, blocks - first), within = t - group * kHeadRunBlocks * heads;
  return {first + within % in_group, within / in_group};
}

/// A range of key blocks of one sequence (split `split` of `splits`) and how many queries see it (its cost):
/// the backward pass's task, once per kv head.
struct KeyTask {
  int64_t sequence, split, cost;
};

/// The backward pass's key tasks, the costliest first (under a causal mask, the first keys' splits, which every
/// later query sees). No task's sums depend on the order.
template <typename T, typename In>
std::vector<KeyTask> key_tasks(const FlashProblem<T, In>& p, const std::vector<Sequence>& seqs, int64_t splits) {
  std::vector<KeyTask> tasks;
  for (int64_t sqi = 0; sqi < static_cast<int64_t>(seqs.size()); ++sqi) {
    const int64_t k_blocks = (seqs[sqi].tk + kBackwardKeyBlock - 1) / kBackwardKeyBlock;
    for (int64_t split = 0; split < splits; ++split) {
      int64_t cost = 0;
      for (int64_t kb = split * k_blocks / splits; kb < (split + 1) * k_blocks / splits; ++kb) {
        const int64_t j0 = kb * kBackwardKeyBlock;
        const auto [q_begin, q_end] = query_range(p, seqs[sqi], j0, std::min(kBackwardKeyBlock, seqs[sqi].tk - j0));
        cost += q_end - q_begin;
      }
      tasks.push_back({sqi, split, cost});
    }
  }
  std::stable_sort(tasks.begin(), tasks.end(), [](const KeyTask& a, const KeyTask& b) { return a.cost > b.cost; });
  return tasks;
}

/// For each (b, kv head, block of `block` rows) of x [B, H_kv, Tk, width]: whether all its elements are
/// finite. One pass over x per call, so the tiles can choose the plain product without scanning their block
/// again.
template <typename T, typename In, typename X>
std::vector<uint8_t> finite_blocks(const FlashProblem<T, In>& p, const View4<const X>& x, int64_t width,
                                   int64_t block) {
  const int64_t blocks = (p.tk + block - 1) / block;
  std::vector<uint8_t> flags(p.batch * p.kv_heads * blocks);
  at::parallel_for(0, static_cast<int64_t>(flags.size()), 8, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const int64_t bh = i / blocks, j0 = (i % blocks) * block;
      flags[i] = all_finite(x.row(bh / p.kv_heads, bh % p.kv_heads, j0), std::min(block, p.tk - j0), width, x.si);
    }
  });
  return flags;
}

/// Whether every row of keys (or values) [g0, g0 + rows) of (b, kv head) is finite, from finite_blocks' flags.
template <typename T, typename In>
bool rows_finite(const FlashProblem<T, In>& p, const std::vector<uint8_t>& flags, int64_t block, int64_t b, int64_t hk,
                 int64_t g0, int64_t rows) {
  const int64_t blocks = (p.tk + block - 1) / block;
  const uint8_t* f = flags.data() + (b * p.kv_heads + hk) * blocks;
  for (int64_t i = g0 / block; i <= (g0 + rows - 1) / block; ++i) {
    if (!f[i]) return false;
  }
  return true;
}

}  // namespace attn::ops::cpu::ATTN_KERNEL_NAMESPACE
