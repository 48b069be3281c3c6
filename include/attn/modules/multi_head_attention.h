#pragma once
// Multi-head attention (notebooks 002-004; torch.nn.MultiheadAttention with batch_first=True).

#include <attn/options.h>

#include <torch/nn/cloneable.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

#include <ostream>
#include <tuple>

namespace attn {

/// query [B, Tq, embed_dim], key [B, Tk, kdim], value [B, Tk, vdim] (or unbatched, without B)
///   -> [B, Tq, embed_dim]  (or [B, Tq, num_heads * head_dim] without an output projection).
///
/// Parameters, created in this order with torch::nn::Linear's default init (as the notebooks do):
///   q_proj [H*hd, embed_dim], k_proj [H*hd, kdim], v_proj [H*hd, vdim], out_proj [embed_dim, H*hd].
/// Note that torch.nn.MultiheadAttention initialises differently (xavier); load its weights to match it.
class MultiHeadAttentionImpl : public torch::nn::Cloneable<MultiHeadAttentionImpl> {
 public:
  MultiHeadAttentionImpl(int64_t embed_dim, int64_t num_heads)
      : MultiHeadAttentionImpl(MultiHeadAttentionOptions(embed_dim, num_heads)) {}
  explicit MultiHeadAttentionImpl(const MultiHeadAttentionOptions& options);

  void reset() override;
  void pretty_print(std::ostream& stream) const override;

  torch::Tensor forward(const torch::Tensor& query, const torch::Tensor& key, const torch::Tensor& value,
                        const AttentionMasks& masks = {});
  /// Also returns the weights: [B, Tq, Tk] averaged over heads, or [B, H, Tq, Tk] per head.
  std::tuple<torch::Tensor, torch::Tensor> forward_with_weights(const torch::Tensor& query,
                                                                const torch::Tensor& key,
                                                                const torch::Tensor& value,
                                                                const AttentionMasks& masks = {},
                                                                HeadWeights head_weights = HeadWeights::Averaged);

  /// Width of one head (options.head_dim, or embed_dim / num_heads).
  int64_t head_dim() const;

  MultiHeadAttentionOptions options;
  torch::nn::Linear q_proj{nullptr};
  torch::nn::Linear k_proj{nullptr};
  torch::nn::Linear v_proj{nullptr};
  /// Null when options.output_projection() is false.
  torch::nn::Linear out_proj{nullptr};

 private:
  std::tuple<torch::Tensor, torch::Tensor> attend(const torch::Tensor& query, const torch::Tensor& key,
                                                  const torch::Tensor& value, const AttentionMasks& masks,
                                                  bool need_weights);
};

TORCH_MODULE(MultiHeadAttention);

}  // namespace attn
