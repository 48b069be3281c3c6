// The C++ entry points of the attn::flash_attention ops: one dispatcher call each, so C++, Python and
// TorchScript callers all reach the same Autograd and CPU kernels. The handles are typed by the schemas' C++
// form (flash_attention_schema.h), which also flattens the arguments.

#include <attn/ops/flash_attention.h>

#include "ops/flash_attention_schema.h"

#include <ATen/core/dispatch/Dispatcher.h>

namespace attn::ops {

std::tuple<torch::Tensor, torch::Tensor> flash_attention(const torch::Tensor& query, const torch::Tensor& key,
                                                         const torch::Tensor& value,
                                                         const FlashArguments& arguments) {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("attn::flash_attention", "")
                             .typed<FlashForwardSchema>();
  return call_forward(op, query, key, value, arguments);
}

std::tuple<torch::Tensor, torch::Tensor, torch::Tensor, torch::Tensor> flash_attention_backward(
    const torch::Tensor& grad_output, const torch::Tensor& query, const torch::Tensor& key,
    const torch::Tensor& value, const torch::Tensor& output, const torch::Tensor& logsumexp,
    const FlashArguments& arguments) {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("attn::flash_attention_backward", "")
                             .typed<FlashBackwardSchema>();
  return call_backward(op, grad_output, query, key, value, output, logsumexp, arguments);
}

}  // namespace attn::ops
