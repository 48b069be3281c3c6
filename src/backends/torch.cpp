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
#include <string>
#include <vector>

namespace attn::backends {
namespace {

/// One call of LibTorch's SDPA: attn's options turned into its arguments.
struct SdpaCall {
  torch::Tensor key, value;
  torch::Tensor mask;     // LibTorch's one mask (bool: may attend; float: additive), undefined for none
  torch::Tensor blocked;  // the blocked pairs behind it, for zeroing rows without keys
  bool causal = false;    // LibTorch's own top-left causality
  bool enable_gqa = false;
};

SdpaCall prepare(const torch::Tensor& query, const torch::Tensor& key_in, const torch::Tensor& value_in,
                 const SdpaOptions& options) {
  SdpaCall call;
  // Grouped K/V heads: LibTorch >= 2.5 reads the shared heads itself (enable_gqa); older ones get copies.
  const int64_t group = kv_group_size(query, key_in);
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 5)
  call.key = key_in;
  call.value = value_in;
  call.enable_gqa = group > 1;
#else
  call.key = repeat_kv_heads(key_in, group);
  call.value = repeat_kv_heads(value_in, group);
#endif
  const int64_t tq = query.size(-2), tk = call.key.size(-2);
  const AttentionMasks& masks = options.masks();
  // A key that is padding for every query contributes nothing, even a NaN or Inf in it (attn's contract), but
  // LibTorch's kernels multiply its zero weight with its value: its rows of K and V become zeros first. A
  // padding mask per query head marks a shared K/V row (grouped heads) only where every head of its group does.
  if (masks.key_padding_mask().defined()) {
    torch::Tensor padded = masks.key_padding_mask();
    const int64_t kv_heads = call.key.dim() >= 3 ? call.key.size(-3) : 1;
    const bool per_query_head = padded.dim() >= 2 && padded.size(-2) != 1 && padded.size(-2) != kv_heads;
    if (per_query_head && (kv_heads == 0 || padded.size(-2) % kv_heads != 0)) {
      padded = torch::Tensor();  // no heads, or a layout that does not group: nothing to zero
    } else if (per_query_head) {
      std::vector<int64_t> grouped(padded.sizes().begin(), padded.sizes().end() - 2);
      grouped.insert(grouped.end(), {kv_heads, padded.size(-2) / kv_heads, padded.size(-1)});
      padded = padded.reshape(grouped).all(-2);
    }
    if (padded.defined()) {
      padded = padded.unsqueeze(-1);
      call.key = call.key.masked_fill(padded, 0.0);
      call.value = call.value.masked_fill(padded, 0.0);
    }
  }
  // LibTorch's is_causal is top-left and excludes a mask: otherwise causality goes into the mask.
  call.causal = options.causal() && masks.empty() && !options.attention().has_window() &&
                !options.alibi_slopes().defined() &&
                (options.causal_alignment() == CausalAlignment::TopLeft || tq == tk);

  // LibTorch's bool mask means "may attend", the opposite of blocked_pairs; an additive mask carries the
  // blocked pairs as -inf instead, and the ALiBi bias.
  SdpaOptions for_mask = options;
  if (call.causal) for_mask.causal(false);
  call.blocked = blocked_pairs(for_mask, tq, tk, query.device());
  torch::Tensor additive = masks.additive_mask();
  if (options.alibi_slopes().defined()) {
    const torch::Tensor bias =
        alibi_bias(options.alibi_slopes(), band_of(options.attention(), tq, tk).offset, tq, tk, query.dim(),
                   query.scalar_type());
    additive = additive.defined() ? additive + bias : bias;
  }
  if (additive.defined()) {
    call.mask = call.blocked.defined()
                    ? additive.masked_fill(call.blocked, -std::numeric_limits<double>::infinity())
                    : additive;
  } else if (call.blocked.defined()) {
    call.mask = call.blocked.logical_not();
  }
  return call;
}

}  // namespace

torch::Tensor torch_attention(const torch::Tensor& query, const torch::Tensor& key_in, const torch::Tensor& value_in,
                              const SdpaOptions& options) {
  const SdpaCall call = prepare(query, key_in, value_in, options);
  const torch::Tensor& key = call.key;
  const torch::Tensor& value = call.value;
  // An undefined tensor would convert to an optional that holds it, which LibTorch then trips over.
  const c10::optional<torch::Tensor> attn_mask =
      call.mask.defined() ? c10::optional<torch::Tensor>(call.mask) : c10::nullopt;
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 1)
  // SDPA takes the scale itself since 2.1; nullopt keeps its default 1/sqrt(d_k).
  const c10::optional<double> scale = optional_scale(options);
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 5)
  torch::Tensor out = at::scaled_dot_product_attention(query, key, value, attn_mask, options.dropout(), call.causal,
                                                       scale, call.enable_gqa);
#else
  torch::Tensor out =
      at::scaled_dot_product_attention(query, key, value, attn_mask, options.dropout(), call.causal, scale);
#endif
#else
  // 1.13 and 2.0 take no scale: fold it into q, relative to the default 1/sqrt(d_k).
  const torch::Tensor q =
      options.scale() ? query * (*options.scale() * std::sqrt(static_cast<double>(query.size(-1)))) : query;
#if TORCH_VERSION_MAJOR >= 2
  torch::Tensor out = at::scaled_dot_product_attention(q, key, value, attn_mask, options.dropout(), call.causal);
#else
  torch::Tensor out = std::get<0>(at::_scaled_dot_product_attention(q, key, value, attn_mask, options.dropout(),
                                                                     /*need_attn_weights=*/false, call.causal));
#endif
#endif
  // Only blocked pairs leave a query with no allowed key (ALiBi's bias alone blocks none). There LibTorch gives
  // NaN, and attn's contract is a zero row: a device-side fill, no host synchronisation.
  if (!call.blocked.defined()) return out;
  return out.masked_fill(rows_without_keys(call.blocked), 0.0);
}

std::string torch_sdpa_kernel(const torch::Tensor& query, const torch::Tensor& key, const torch::Tensor& value,
                              const SdpaOptions& options) {
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 5)
  const SdpaCall call = prepare(query, key, value, options);
  const c10::optional<torch::Tensor> attn_mask =
      call.mask.defined() ? c10::optional<torch::Tensor>(call.mask) : c10::nullopt;
  // LibTorch's own choice among its kernels (sdp::SDPBackend), made as scaled_dot_product_attention makes it.
  const int64_t choice = at::_fused_sdp_choice(query, call.key, call.value, attn_mask, options.dropout(), call.causal,
                                               optional_scale(options), call.enable_gqa);
  switch (choice) {
    case 0: return "math";
    case 1: return "flash";
    case 2: return "efficient";
    case 3: return "cudnn";
    case 4: return "overrideable";
    default: return "none";
  }
#else
  (void)query, (void)key, (void)value, (void)options;
  return "LibTorch " TORCH_VERSION " does not say";
#endif
}

}  // namespace attn::backends
