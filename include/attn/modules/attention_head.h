#pragma once
// One attention head, as notebooks 000-002 build it: x -> (W_q x, W_k x, W_v x) -> softmax(q kᵀ/√d_k) v.

#include <attn/options.h>

#include <torch/nn/cloneable.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

#include <ostream>
#include <tuple>

namespace attn {

/// Inputs are [B, T, d_in] or unbatched [T, d_in]; the output is [B, Tq, d_v] ([Tq, d_v]).
/// Parameters: q_proj [d_k, d_in], k_proj [d_k, d_in], v_proj [d_v, d_in] (torch::nn::Linear, created in
/// that order with Linear's default init, so a seeded C++ build draws the same weights as Python).
class AttentionHeadImpl : public torch::nn::Cloneable<AttentionHeadImpl> {
 public:
  AttentionHeadImpl(int64_t d_in, int64_t d_k) : AttentionHeadImpl(AttentionHeadOptions(d_in, d_k)) {}
  explicit AttentionHeadImpl(const AttentionHeadOptions& options);

  /// Validates the options and creates the parameters: the constructor calls it, and clone() on the copy. It
  /// cannot run again on a built module; to change the options, build a new module.
  void reset() override;
  void pretty_print(std::ostream& stream) const override;

  /// Self-attention: queries, keys and values all come from x.
  torch::Tensor forward(const torch::Tensor& x);
  /// General form: queries from q_in [B, Tq, d_in], keys and values from k_in, v_in [B, Tk, d_in].
  torch::Tensor forward(const torch::Tensor& q_in, const torch::Tensor& k_in, const torch::Tensor& v_in,
                        const AttentionMasks& masks = {});
  /// Also returns the attention weights [B, Tq, Tk] ([Tq, Tk] unbatched).
  std::tuple<torch::Tensor, torch::Tensor> forward_with_weights(const torch::Tensor& q_in,
                                                                const torch::Tensor& k_in,
                                                                const torch::Tensor& v_in,
                                                                const AttentionMasks& masks = {});

  AttentionHeadOptions options;
  torch::nn::Linear q_proj{nullptr};
  torch::nn::Linear k_proj{nullptr};
  torch::nn::Linear v_proj{nullptr};

 private:
  std::tuple<torch::Tensor, torch::Tensor> attend(const torch::Tensor& q_in, const torch::Tensor& k_in,
                                                  const torch::Tensor& v_in, const AttentionMasks& masks,
                                                  bool need_weights, bool one_input = false);
};

TORCH_MODULE(AttentionHead);

}  // namespace attn
