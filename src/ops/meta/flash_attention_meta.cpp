// The Meta kernels of the attn::flash_attention ops: shapes, dtypes and strides without data, the same as the
// CPU kernels' (ops/attention_contract.h). PyTorch 2.x's torch.compile and torch.export trace custom ops
// with these (as their "fake" implementation); any LibTorch can run the ops on the meta device with them.
// They read sizes and causal_offset as c10::SymInt only, so a trace with a dynamic sequence length
// (torch.compile(dynamic=True), torch.export's Dim) keeps it symbolic: one graph serves every length, and every
// cache length with causal_offset = Tk - Tq.

#include "ops/attention_contract.h"
#include "ops/flash_attention_schema.h"

#include <ATen/ATen.h>
#include <torch/library.h>

namespace attn::ops::meta {
namespace {

std::tuple<at::Tensor, at::Tensor> flash_attention_meta(const at::Tensor& query, const at::Tensor& key,
                                                        const at::Tensor& value, const FlashArguments& arguments) {
  const SymFlashSizes s = check_forward_args_symbolic(kForwardOp, query, key, value, arguments);
  // As the CPU kernel: the output in the query's dtype, the log-sum-exp in float32 for bfloat16 and float16 inputs.
  return empty_forward_results(s, query.options(), compute_type(query));
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> flash_attention_backward_meta(
    const at::Tensor& grad_output, const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
    const at::Tensor& output, const at::Tensor& logsumexp, const FlashArguments& arguments) {
  check_backward_args_symbolic(grad_output, query, key, value, output, logsumexp, arguments);
  // The CPU kernel returns contiguous gradients in the inputs' dtype, and d sinks in the sinks' own.
  return {at::empty_symint(query.sym_sizes(), query.options()), at::empty_symint(key.sym_sizes(), key.options()),
          at::empty_symint(value.sym_sizes(), value.options()),
          arguments.has_sinks() ? at::empty_symint(arguments.sinks->sym_sizes(), arguments.sinks->options())
                                : at::empty({0}, query.options())};
}

}  // namespace

TORCH_LIBRARY_IMPL(attn, Meta, m) {
  m.impl("flash_attention", TORCH_FN(ForwardKernel<flash_attention_meta>::call));
  m.impl("flash_attention_backward", TORCH_FN(BackwardKernel<flash_attention_backward_meta>::call));
}

}  // namespace attn::ops::meta
