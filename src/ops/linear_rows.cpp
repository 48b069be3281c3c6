// The C++ entry points of the attn::linear_rows and attn::linear_rows_many ops: one dispatcher call each.

#include <attn/ops/linear_rows.h>

#include <ATen/core/dispatch/Dispatcher.h>

namespace attn::ops {

torch::Tensor linear_rows(const torch::Tensor& input, const torch::Tensor& weight,
                          const c10::optional<torch::Tensor>& bias) {
  static const auto op =
      c10::Dispatcher::singleton().findSchemaOrThrow("attn::linear_rows", "").typed<decltype(linear_rows)>();
  return op.call(input, weight, bias);
}

std::vector<torch::Tensor> linear_rows_many(const torch::Tensor& input, at::TensorList weights,
                                            const c10::List<c10::optional<torch::Tensor>>& biases) {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("attn::linear_rows_many", "")
                             .typed<decltype(linear_rows_many)>();
  return op.call(input, weights, biases);
}

}  // namespace attn::ops
