#pragma once
// What every rank of a ring_attention call has agreed on (agree_on_plan: one all-gather of each rank's shapes,
// dtypes and options), and the block calls one step makes.

#include <attn/distributed/ring_attention.h>

#include <torch/types.h>

#include <chrono>
#include <cstdint>
#include <vector>

namespace attn::distributed::detail {

struct RingPlan {
  int rank = 0;
  int world = 1;
  int64_t seq_len = 0;
  std::vector<int64_t> lengths;                        ///< positions each rank holds
  std::vector<std::vector<SequenceSegment>> segments;  ///< each rank's segments
  int64_t batch = 0, heads = 0, kv_heads = 0, head_dim_qk = 0, head_dim_v = 0;
  torch::ScalarType dtype = torch::kFloat;
  torch::Device device = torch::kCPU;  ///< where q, k, v live; the accumulators and K/V buffers go there too
  bool is_causal = false;
  bool has_padding = false;
  ContextParallelStrategy strategy = ContextParallelStrategy::Ring;
  SequenceLayout layout = SequenceLayout::Zigzag;
  std::optional<double> scale;
  std::chrono::milliseconds timeout{0};

  int next() const { return (rank + 1) % world; }
  int previous() const { return (rank + world - 1) % world; }
  /// The rank whose K/V shard this rank holds at `step`.
  int source(int step) const { return (rank - step % world + world) % world; }
  /// float64 for float64 inputs, else float32: the accumulators' and the log-sum-exp's dtype.
  torch::ScalarType accumulate_dtype() const { return dtype == torch::kDouble ? torch::kDouble : torch::kFloat; }
  /// The accumulators' options: accumulate_dtype() on the inputs' device.
  torch::TensorOptions accumulate_options() const {
    return torch::TensorOptions().dtype(accumulate_dtype()).device(device);
  }
};

/// Checks, on every rank alike, that the ranks agree on shapes, dtypes and options, and returns the plan.
/// One all-gather of a small descriptor; a mismatch throws the same error on every rank. `differentiable`:
/// whether this rank will run the backward pass (the ranks must agree on that too).
RingPlan agree_on_plan(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                       const RingAttentionOptions& options, c10d::ProcessGroup& group, bool differentiable);

/// What a call's backward pass needs besides its saved tensors (kept in autograd contexts as a capsule).
struct RingContext : torch::CustomClassHolder {
  c10::intrusive_ptr<c10d::ProcessGroup> group;
  RingPlan plan;
  torch::Tensor padding;  ///< this rank's bool [B, T_local], or undefined
  std::shared_ptr<RingAttentionStats> stats;
};

/// The strategies, each (output, log-sum-exp) of this rank's rows; differentiable in q, k, v.
std::tuple<torch::Tensor, torch::Tensor> ring_strategy(const c10::intrusive_ptr<RingContext>& context,
                                                       const torch::Tensor& q, const torch::Tensor& k,
                                                       const torch::Tensor& v, bool differentiable);
std::tuple<torch::Tensor, torch::Tensor> ulysses_strategy(const c10::intrusive_ptr<RingContext>& context,
                                                          const torch::Tensor& q, const torch::Tensor& k,
                                                          const torch::Tensor& v);

/// One call of the fused kernel: local query rows [q_start, q_start + q_length) against rows
/// [k_start, k_start + k_length) of the K/V shard held, causal with `causal_offset` or not at all.
struct BlockCall {
  int64_t q_start, q_length, k_start, k_length;
  bool causal;
  int64_t causal_offset;
};

/// The calls that attend the query segments to the key segments, blocked pairs left out. Under a causal
/// mask a key at global position j is allowed for a query at position i iff j <= i.
std::vector<BlockCall> block_calls(const std::vector<SequenceSegment>& query_segments,
                                   const std::vector<SequenceSegment>& key_segments, bool is_causal);

}  // namespace attn::distributed::detail
