// The C++ entry point of the attn::rotary_positions op: one dispatcher call.

#include <attn/ops/rotary_positions.h>

#include <ATen/core/dispatch/Dispatcher.h>

namespace attn::ops {

torch::Tensor rotary_positions(const torch::Tensor& x, const torch::Tensor& positions, const torch::Tensor& inv_freq,
                               double attention_factor, bool interleaved) {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("attn::rotary_positions", "")
                             .typed<decltype(rotary_positions)>();
  return op.call(x, positions, inv_freq, attention_factor, interleaved);
}

}  // namespace attn::ops
