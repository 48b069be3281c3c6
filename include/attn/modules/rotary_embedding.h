#pragma once
// Rotary position embeddings as a module: the frequencies of one configuration as a buffer, applied to q or
// k at explicit positions, so that KV caches, left padding and packed sequences get the right angles.

#include <attn/rotary.h>

#include <torch/nn/cloneable.h>
#include <torch/nn/pimpl.h>

#include <ostream>

namespace attn {

/// x is [B, H, T, head_dim] (or [H, T, head_dim] unbatched); positions are integers, [T] (shared by the batch)
/// or [B, T] (one row per sequence: each row's own offset or left padding). The first rotary_dim channels of
/// each head rotate by position · inv_freq; the rest pass through.
///
/// Buffer: inv_freq [rotary_dim / 2], float64, moved by ->to(device). With DynamicNTK scaling the frequencies
/// depend on the longest position seen in the call, which is read on the host (one synchronisation per call).
/// The module holds no per-call state: threads may share it.
class RotaryEmbeddingImpl : public torch::nn::Cloneable<RotaryEmbeddingImpl> {
 public:
  explicit RotaryEmbeddingImpl(int64_t rotary_dim) : RotaryEmbeddingImpl(RotaryEmbeddingOptions(rotary_dim)) {}
  explicit RotaryEmbeddingImpl(const RotaryEmbeddingOptions& options);

  void reset() override;
  void pretty_print(std::ostream& stream) const override;

  /// x rotated at `positions`; x is not modified.
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& positions) const;
  /// x rotated at `positions` by `frequencies`: a call's queries and keys share one set. (Not a forward()
  /// overload: ModuleHolder's operator() needs forward to be one function.)
  torch::Tensor rotate(const torch::Tensor& x, const torch::Tensor& positions,
                       const RotaryFrequencies& frequencies) const;
  /// The frequencies for `positions`: the module's own, except that DynamicNTK takes those of a sequence as long
  /// as the furthest position. The modules take them at the keys' positions, and rotate the queries with them too.
  RotaryFrequencies frequencies_at(const torch::Tensor& positions) const;
  /// The frequencies of a sequence of `seq_len` positions (only DynamicNTK depends on it): a shard's rows take
  /// the whole sequence's.
  RotaryFrequencies frequencies(int64_t seq_len) const;
  /// cos and sin for `positions` [...]: [..., rotary_dim / 2] in `dtype`, attention factor included.
  std::tuple<torch::Tensor, torch::Tensor> cos_sin(const torch::Tensor& positions, torch::Dtype dtype) const;

  RotaryEmbeddingOptions options;
  torch::Tensor inv_freq;
  double attention_factor = 1.0;
};

TORCH_MODULE(RotaryEmbedding);

}  // namespace attn
