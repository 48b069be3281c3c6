// The Meta kernels of the attn::flash_attention ops: shapes, dtypes and strides without data, the same as the
// CPU kernels' (ops/attention_contract.h). PyTorch 2.x's torch.compile and torch.export trace custom ops
// with these (as their "fake" implementation); any LibTorch can run the ops on the meta device with them.

#include "ops/attention_contract.h"
#include "ops/flash_attention_schema.h"

#include <ATen/ATen.h>
#include <torch/library.h>

namespace attn::ops::meta {
namespace {

std::tuple<at::Tensor, at::Tensor> flash_attention_meta(const at::Tensor& query, const at::Tensor& key,
                                                        const at::Tensor& value, const FlashArguments& arguments) {
  const FlashSizes s = check_forward_args(kForwardOp, query, key, value, arguments);
  // As the CPU kernel: the output in the query's dtype, the log-sum-exp in float32 for bfloat16 inputs.
  return empty_forward_results(s, query.options(), compute_type(query));
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> flash_attention_backward_meta(
    const at::Tensor& grad_output, const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
    const at::Tensor& output, const at::Tensor& logsumexp, const FlashArguments& arguments) {
  check_backward_args(grad_output, query, key, value, output, logsumexp, arguments);
  // The CPU kernel returns contiguous gradients in the inputs' dtype, and d sinks in the sinks' own.
  return {at::empty(query.sizes(), query.options()), at::empty(key.sizes(), key.options()),
          at::empty(value.sizes(), value.options()),
          arguments.has_sinks() ? at::empty(arguments.sinks->sizes(), arguments.sinks->options())
                                : at::empty({0}, query.options())};
}

}  // namespace

TORCH_LIBRARY_IMPL(attn, Meta, m) {
  m.impl("flash_attention", TORCH_FN(ForwardKernel<flash_attention_meta>::call));
  m.impl("flash_attention_backward", TORCH_FN(BackwardKernel<flash_attention_backward_meta>::call));
}

}  // namespace attn::ops::meta
