#pragma once
// Cross-attention (notebook 000): queries from one sequence, keys and values from another ("context",
// e.g. the encoder's output), which may have a different length and a different width.

#include <attn/kv_cache.h>
#include <attn/options.h>

#include <torch/nn/cloneable.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

#include <ostream>
#include <tuple>

namespace attn {
namespace modules {
struct ScoreTerms;
}

/// x [B, Tq, d_query_in], context [B, Tc, d_context_in] (or unbatched) -> [B, Tq, num_heads * d_v].
/// Parameters: q_proj [H*d_k, d_query_in], k_proj [H*d_k, d_context_in], v_proj [H*d_v, d_context_in], and
/// with options.sinks, sinks [H].
/// masks.key_padding_mask is over the context: [B, Tc], true = padding.
class CrossAttentionImpl : public torch::nn::Cloneable<CrossAttentionImpl> {
 public:
  CrossAttentionImpl(int64_t d_query_in, int64_t d_context_in, int64_t d_k)
      : CrossAttentionImpl(CrossAttentionOptions(d_query_in, d_context_in, d_k)) {}
  explicit CrossAttentionImpl(const CrossAttentionOptions& options);

  void reset() override;
  void pretty_print(std::ostream& stream) const override;

  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& context, const AttentionMasks& masks = {});
  /// Also returns the weights: [B, Tq, Tc] averaged over heads, or [B, H, Tq, Tc] per head.
  std::tuple<torch::Tensor, torch::Tensor> forward_with_weights(const torch::Tensor& x,
                                                                const torch::Tensor& context,
                                                                const AttentionMasks& masks = {},
                                                                HeadWeights head_weights = HeadWeights::Averaged);

  /// context [B, Tc, d_context_in] (or unbatched) projected into key and value heads once: a decoder reuses it
  /// on every step instead of projecting the same encoder output again.
  ProjectedMemory project_memory(const torch::Tensor& context) const;
  /// forward(x, context, masks) with the context already projected by project_memory(context).
  torch::Tensor forward_with_memory(const torch::Tensor& x, const ProjectedMemory& memory,
                                    const AttentionMasks& masks = {});

  CrossAttentionOptions options;
  torch::nn::Linear q_proj{nullptr};
  torch::nn::Linear k_proj{nullptr};
  torch::nn::Linear v_proj{nullptr};
  /// The learned attention sinks [num_heads] when options.sinks(), else undefined.
  torch::Tensor sinks;

 private:
  modules::ScoreTerms score_terms() const;
  std::tuple<torch::Tensor, torch::Tensor> attend(const torch::Tensor& x, const torch::Tensor& context,
                                                  const AttentionMasks& masks, bool need_weights);

  int64_t built_heads_ = 0;  // the heads reset() laid the parameters out for
};

TORCH_MODULE(CrossAttention);

}  // namespace attn
