// Backend::Torch: LibTorch's own scaled_dot_product_attention (at::_scaled_dot_product_attention on 1.13),
// which on CUDA with LibTorch >= 2 picks FlashAttention, memory-efficient or cuDNN kernels. It takes one
// mask and aligns causal top-left, so attn's masks are combined into one here.

#include "backends/groups.h"
#include "backends/implementations.h"
#include "backends/masks.h"
#include "backends/op_arguments.h"

#include <ATen/ATen.h>
#include <torch/version.h>

#include <cmath>
#include <limits>

namespace attn::backends {
torch::Tensor torch_attention(const torch::Tensor& query, const torch::Tensor& key_in, const torch::Tensor& value_in,
                              const SdpaOptions& options) {
  // Grouped K/V heads: LibTorch >= 2.5 reads the shared heads itself (enable_gqa); older ones get copies.
  const int64_t group = kv_group_size(query, key_in);
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 5)
  const torch::Tensor& key = key_in;
  const torch::Tensor& value = value_in;
  const bool enable_gqa = group > 1;
#else
  const torch::Tensor key = repeat_kv_heads(key_in, group);
  const torch::Tensor value = repeat_kv_heads(value_in, group);
#endif
  const int64_t tq = query.size(-2), tk = key.size(-2);
  const AttentionMasks& masks = options.masks();
  // LibTorch's is_causal is top-left and excludes a mask: otherwise causality goes into the mask.
  const bool native_causal = options.causal() && masks.empty() && !options.attention().has_window() &&
                             !options.alibi_slopes().defined() &&
                             (options.causal_alignment() == CausalAlignment::TopLeft || tq == tk);

  // LibTorch's bool mask means "may attend", the opposite of blocked_pairs; an additive mask carries the
  // blocked pairs as -inf instead, and the ALiBi bias.
  SdpaOptions for_mask = options;
  if (native_causal) for_mask.causal(false);
  const torch::Tensor blocked = blocked_pairs(for_mask, tq, tk, query.device());
  torch::Tensor additive = masks.additive_mask();
  if (options.alibi_slopes().defined()) {
    const torch::Tensor bias =
        alibi_bias(options.alibi_slopes(), band_of(options.attention(), tq, tk).offset, tq, tk, query.scalar_type());
    additive = additive.defined() ? additive + bias : bias;
  }
  torch::Tensor mask;
  if (additive.defined()) {
    mask = blocked.defined() ? additive.masked_fill(blocked, -std::numeric_limits<double>::infinity()) : additive;
  } else if (blocked.defined()) {
    mask = blocked.logical_not();
  }

  // An undefined tensor would convert to an optional that holds it, which LibTorch then trips over.
  const c10::optional<torch::Tensor> attn_mask = mask.defined() ? c10::optional<torch::Tensor>(mask) : c10::nullopt;
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 1)
  // SDPA takes the scale itself since 2.1; nullopt keeps its default 1/sqrt(d_k).
  const c10::optional<double> scale = optional_scale(options);
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 5)
  torch::Tensor out = at::scaled_dot_product_attention(query, key, value, attn_mask, options.dropout(),
                                                       native_causal, scale, enable_gqa);
#else
  torch::Tensor out =
      at::scaled_dot_product_attention(query, key, value, attn_mask, options.dropout(), native_causal, scale);
#endif
#else
  // 1.13 and 2.0 take no scale: fold it into q, relative to the default 1/sqrt(d_k).
  const torch::Tensor q =
      options.scale() ? query * (*options.scale() * std::sqrt(static_cast<double>(query.size(-1)))) : query;
#if TORCH_VERSION_MAJOR >= 2
  torch::Tensor out = at::scaled_dot_product_attention(q, key, value, attn_mask, options.dropout(), native_causal);
#else
  torch::Tensor out = std::get<0>(at::_scaled_dot_product_attention(q, key, value, attn_mask, options.dropout(),
                                                                     /*need_attn_weights=*/false, native_causal));
#endif
#endif
  if (!mask.defined()) return out;
  // A query with no allowed key: LibTorch gives NaN there; attn's contract is a zero row. This is a
  // device-side fill, no host synchronisation.
  return out.masked_fill(rows_without_keys(blocked), 0.0);
}

}  // namespace attn::backends
