#pragma once
// Context parallelism: attention over a sequence split across the ranks of a c10d process group. Each rank
// holds a shard of q, k and v (attn/distributed/sequence_layout.h says which positions); K/V shards travel
// around a ring, one hop per step, while each rank attends its queries to the shard it holds and merges the
// partial results by their log-sum-exp. The backward pass rotates K/V again and passes the dK/dV accumulators
// around a second ring. Every block runs on attn's fused kernel; no [T, T] tensor exists on any rank. The
// Ulysses strategy (options.strategy) exchanges heads for sequence with all-to-alls instead.
//
// Collective: every rank of the group must call ring_attention (and run the backward pass, when one rank
// does) with the same options, in the same order relative to its other traffic on the group. The first step
// of each call is one small all-gather in which the ranks compare shapes, dtypes and options: a mismatch
// ends the call on every rank with the same error, before any K/V moves. docs/context-parallel.md has an
// example of a two-process run.

#include <attn/distributed/sequence_layout.h>

#include <torch/arg.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/types.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <tuple>

namespace attn {
class MultiHeadAttention;
}

namespace attn::distributed {

/// What a call measured, summed over its forward and backward passes. Fill one by passing it in the options.
struct RingAttentionStats {
  int64_t bytes_sent = 0;         ///< K/V shards and dK/dV accumulators this rank sent
  int64_t bytes_received = 0;
  int64_t hops = 0;               ///< point-to-point exchanges this rank waited for
  double compute_seconds = 0.0;   ///< local block computations and merges
  double wait_seconds = 0.0;      ///< blocked on communication that compute did not hide
  /// The part of wait_seconds spent on K/V hops. Those only move data, while a dK/dV hop also waits for the
  /// previous rank to finish its block, so this is the measure of K/V traffic that compute did not hide.
  double keys_values_wait_seconds = 0.0;
  double total_seconds = 0.0;     ///< wall time inside ring_attention's forward and backward
  // With the Ulysses strategy, compute_seconds and total_seconds cover the forward pass only (its backward
  // attention runs in autograd), while wait_seconds and the bytes count every all-to-all, both passes.
};

/// How the ranks share the work of one attention.
enum class ContextParallelStrategy {
  /// K/V shards travel around a ring while each rank attends its queries to the one it holds; communication
  /// overlaps compute. Any head count.
  Ring,
  /// DeepSpeed-Ulysses: an all-to-all turns sequence shards into head shards (each rank then holds the whole
  /// sequence for H/N query heads and H_kv/N K/V heads), attention runs locally, and a second all-to-all turns
  /// the output back into sequence shards. Needs N to divide H and H_kv; the all-to-alls are not overlapped.
  Ulysses,
};

/// "ring" or "ulysses".
const char* to_string(ContextParallelStrategy strategy);

/// The send/recv tags ring_attention uses are kRingTagBase + 3·step + kind (kind 0..2, step < N), on the
/// group it is given. Keep other send/recv traffic on the same group out of that range.
constexpr int kRingTagBase = 0x52494e00;

struct RingAttentionOptions {
  /// Ring (the default) or Ulysses; every rank must pass the same.
  TORCH_ARG(ContextParallelStrategy, strategy) = ContextParallelStrategy::Ring;
  /// Causal over global positions: the query at position i attends keys at positions j <= i.
  TORCH_ARG(bool, is_causal) = false;
  /// How the sequence is split over the ranks; every rank's shards must follow it.
  TORCH_ARG(SequenceLayout, layout) = SequenceLayout::Zigzag;
  /// Multiplies q·k; default 1 / sqrt(d_k).
  TORCH_ARG(std::optional<double>, scale) = std::nullopt;
  /// This rank's shard of a key padding mask, bool [B, T_local], true = padding (no query attends to it). It
  /// travels around the ring with its keys. Undefined: no padding.
  TORCH_ARG(torch::Tensor, key_padding_mask) = {};
  /// The longest wait for any one exchange, agreement included. A rank that never calls, or dies, ends the
  /// call on the others with an error after this long at most (sooner when the transport sees the socket
  /// close). After such an error the group is unusable (messages of the failed call may still arrive): make a
  /// new one.
  TORCH_ARG(std::chrono::milliseconds, timeout) = std::chrono::minutes(5);
  /// Filled with this call's measurements (added to what it holds), when set.
  TORCH_ARG(std::shared_ptr<RingAttentionStats>, stats) = nullptr;
};

/// Attention of this rank's queries over the whole sequence's keys. q [B, H, T_local, d_k],
/// k [B, H_kv, T_local, d_k], v [B, H_kv, T_local, d_v] (H_kv divides H: grouped-query attention), the shards
/// of options.layout; float32, float64 or bfloat16 on the CPU. Returns [B, H, T_local, d_v], this rank's rows
/// of the output. Differentiable with respect to q, k and v: the backward pass is collective too.
torch::Tensor ring_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                             const c10::intrusive_ptr<c10d::ProcessGroup>& group,
                             const RingAttentionOptions& options = {});

/// ring_attention and the global log-sum-exp of this rank's rows, [B, H, T_local] (float32, float64 for
/// float64 inputs; -inf for a row that may attend no key). The log-sum-exp has no gradient.
std::tuple<torch::Tensor, torch::Tensor> ring_attention_with_lse(const torch::Tensor& q, const torch::Tensor& k,
                                                                 const torch::Tensor& v,
                                                                 const c10::intrusive_ptr<c10d::ProcessGroup>& group,
                                                                 const RingAttentionOptions& options = {});

/// A MultiHeadAttention's self-attention, context-parallel: `y = mha(x)` becomes
/// `y = attn::distributed::context_parallel(mha, x, group, options)`, with x this rank's shard [B, T_local, E]
/// and y its rows of the output. The module's projections, rotary embeddings (at each row's global position),
/// grouped K/V heads and output projection apply as in forward(x, x, x). Causal when the module is causal or
/// options.is_causal is set; options.scale defaults to the module's. Differentiable, collective. Its own checks
/// of x and of the module's options run on each rank alone (a rank that fails one throws, and the others end
/// at options.timeout); ring_attention's agreement follows.
torch::Tensor context_parallel(const MultiHeadAttention& mha, const torch::Tensor& x,
                               const c10::intrusive_ptr<c10d::ProcessGroup>& group,
                               std::optional<RingAttentionOptions> options = std::nullopt);

}  // namespace attn::distributed
