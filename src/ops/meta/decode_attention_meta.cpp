// The Meta kernel of the attn::decode_attention op: the CPU kernel's checks over symbolic sizes, and its output's
// shape, dtype and strides, without reading the positions (torch.compile and torch.export trace with it).

#include "ops/attention_contract.h"

#include <ATen/ATen.h>
#include <torch/library.h>

namespace attn::ops::meta {
namespace {

constexpr const char* kOp = "attn::decode_attention";

at::Tensor decode_attention_meta(const at::Tensor& query, const at::Tensor& key_cache, const at::Tensor& value_cache,
                                 const at::Tensor& query_starts, const at::Tensor& key_lengths, bool is_causal,
                                 c10::optional<double> scale, int64_t window_left, int64_t window_right,
                                 double softcap, const c10::optional<at::Tensor>& alibi_slopes,
                                 const c10::optional<at::Tensor>& sinks, const c10::optional<at::Tensor>& key_scales,
                                 const c10::optional<at::Tensor>& value_scales,
                                 const c10::optional<at::Tensor>& block_table,
                                 const c10::optional<at::Tensor>& tree_mask) {
  const DecodeOnlyInputs decode_only = DecodeOnlyInputs::of(key_scales, value_scales, block_table, tree_mask);
  const SymCacheSizes s =
      check_decode_op_args_symbolic(kOp, query, key_cache, value_cache, query_starts, key_lengths, decode_only,
                                    is_causal, scale, window_left, window_right, softcap, alibi_slopes, sinks);
  return empty_decode_output(s, query.options());
}

}  // namespace

TORCH_LIBRARY_IMPL(attn, Meta, m) { m.impl("decode_attention", TORCH_FN(decode_attention_meta)); }

}  // namespace attn::ops::meta
