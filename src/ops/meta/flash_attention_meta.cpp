// The Meta kernels of the attn::flash_attention ops: shapes, dtypes and strides without data, the same as the
// CPU kernels' (ops/flash_attention_contract.h). PyTorch 2.x's torch.compile and torch.export trace custom ops
// with these (as their "fake" implementation); any LibTorch can run the ops on the meta device with them.

#include "ops/flash_attention_contract.h"

#include <ATen/ATen.h>
#include <torch/library.h>

namespace attn::ops::meta {
namespace {

std::tuple<at::Tensor, at::Tensor> flash_attention_meta(const at::Tensor& query, const at::Tensor& key,
                                                        const at::Tensor& value,
                                                        const c10::optional<at::Tensor>& key_padding_mask,
                                                        const c10::optional<at::Tensor>& attend_mask,
                                                        const c10::optional<at::Tensor>& additive_mask,
                                                        bool /*is_causal*/, int64_t causal_offset,
                                                        c10::optional<double> scale, int64_t window_left,
                                                        int64_t window_right, double softcap,
                                                        const c10::optional<at::Tensor>& alibi_slopes,
                                                        const c10::optional<at::Tensor>& sinks,
                                                        const c10::optional<at::Tensor>& cu_seqlens_q,
                                                        const c10::optional<at::Tensor>& cu_seqlens_k) {
  const FlashSizes s =
      check_forward_args(kForwardOp, query, key, value, key_padding_mask, attend_mask, additive_mask, scale);
  check_variant_args(kForwardOp, s, query, any_mask(key_padding_mask, attend_mask, additive_mask), causal_offset,
                     window_left, window_right, softcap, alibi_slopes, sinks, cu_seqlens_q, cu_seqlens_k);
  // As the CPU kernel: the output in the query's dtype, the log-sum-exp in float32 for bfloat16 inputs.
  return empty_forward_results(s, query.options(), compute_type(query));
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> flash_attention_backward_meta(
    const at::Tensor& grad_output, const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
    const at::Tensor& output, const at::Tensor& logsumexp, const c10::optional<at::Tensor>& key_padding_mask,
    const c10::optional<at::Tensor>& attend_mask, const c10::optional<at::Tensor>& additive_mask,
    bool /*is_causal*/, int64_t causal_offset, c10::optional<double> scale, int64_t window_left,
    int64_t window_right, double softcap, const c10::optional<at::Tensor>& alibi_slopes,
    const c10::optional<at::Tensor>& sinks, const c10::optional<at::Tensor>& cu_seqlens_q,
    const c10::optional<at::Tensor>& cu_seqlens_k) {
  const FlashSizes s = check_backward_args(grad_output, query, key, value, output, logsumexp, key_padding_mask,
                                           attend_mask, additive_mask, scale);
  check_variant_args(kBackwardOp, s, query, any_mask(key_padding_mask, attend_mask, additive_mask), causal_offset,
                     window_left, window_right, softcap, alibi_slopes, sinks, cu_seqlens_q, cu_seqlens_k);
  // The CPU kernel returns contiguous gradients in the inputs' dtype, and d sinks in the sinks' own.
  const bool has_sinks = sinks && sinks->defined();
  return {at::empty(query.sizes(), query.options()), at::empty(key.sizes(), key.options()),
          at::empty(value.sizes(), value.options()),
          has_sinks ? at::empty(sinks->sizes(), sinks->options()) : at::empty({0}, query.options())};
}

}  // namespace

TORCH_LIBRARY_IMPL(attn, Meta, m) {
  m.impl("flash_attention", TORCH_FN(flash_attention_meta));
  m.impl("flash_attention_backward", TORCH_FN(flash_attention_backward_meta));
}

}  // namespace attn::ops::meta
