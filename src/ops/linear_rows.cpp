// The C++ entry point of the attn::linear_rows op: one dispatcher call.

#include <attn/ops/linear_rows.h>

#include <ATen/core/dispatch/Dispatcher.h>

namespace attn::ops {

torch::Tensor linear_rows(const torch::Tensor& input, const torch::Tensor& weight,
                          const c10::optional<torch::Tensor>& bias) {
  static const auto op =
      c10::Dispatcher::singleton().findSchemaOrThrow("attn::linear_rows", "").typed<decltype(linear_rows)>();
  return op.call(input, weight, bias);
}

}  // namespace attn::ops
