// The C++ entry point of the attn::decode_attention op: one dispatcher call.

#include <attn/ops/decode_attention.h>

#include <ATen/core/dispatch/Dispatcher.h>

namespace attn::ops {

torch::Tensor decode_attention(const torch::Tensor& query, const torch::Tensor& key_cache,
                               const torch::Tensor& value_cache, const torch::Tensor& query_starts,
                               const torch::Tensor& key_lengths, bool is_causal, c10::optional<double> scale,
                               int64_t window_left, int64_t window_right, double softcap,
                               const c10::optional<torch::Tensor>& alibi_slopes,
                               const c10::optional<torch::Tensor>& sinks,
                               const c10::optional<torch::Tensor>& key_scales,
                               const c10::optional<torch::Tensor>& value_scales,
                               const c10::optional<torch::Tensor>& block_table,
                               const c10::optional<torch::Tensor>& tree_mask) {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("attn::decode_attention", "")
                             .typed<decltype(decode_attention)>();
  return op.call(query, key_cache, value_cache, query_starts, key_lengths, is_causal, scale, window_left,
                 window_right, softcap, alibi_slopes, sinks, key_scales, value_scales, block_table, tree_mask);
}

}  // namespace attn::ops
