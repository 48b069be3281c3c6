// Backend::Torch: LibTorch's own scaled_dot_product_attention (at::_scaled_dot_product_attention on 1.13),
// which on CUDA with LibTorch >= 2 picks FlashAttention, memory-efficient or cuDNN kernels. It takes one
// mask and aligns causal top-left, so attn's masks are combined into one here.

#include "detail/attention.h"

#include <ATen/ATen.h>
#include <torch/version.h>

#include <cmath>
#include <limits>

namespace attn::detail {
namespace {

torch::Tensor both(const torch::Tensor& a, const torch::Tensor& b) {
  if (!a.defined()) return b;
  if (!b.defined()) return a;
  return a.logical_and(b);
}

}  // namespace

torch::Tensor torch_attention(const torch::Tensor& query, const torch::Tensor& key, const torch::Tensor& value,
                              const SdpaOptions& options) {
  const int64_t tq = query.size(-2), tk = key.size(-2);
  const AttentionMasks& masks = options.masks();
  // LibTorch's is_causal is top-left and excludes a mask: otherwise causality goes into the mask.
  const bool native_causal = options.causal() && masks.empty() &&
                             (options.causal_alignment() == CausalAlignment::TopLeft || tq == tk);

  torch::Tensor allowed;  // bool, true = may attend; undefined when every pair is allowed
  if (masks.key_padding_mask().defined()) allowed = masks.key_padding_mask().logical_not().unsqueeze(-2);
  if (masks.attend_mask().defined()) allowed = both(allowed, masks.attend_mask());
  if (options.causal() && !native_causal) {
    auto opts = torch::TensorOptions().dtype(torch::kLong).device(query.device());
    const int64_t offset = options.causal_alignment() == CausalAlignment::BottomRight ? tk - tq : 0;
    allowed = both(allowed, torch::arange(tk, opts).unsqueeze(0) <= torch::arange(tq, opts).unsqueeze(1) + offset);
  }
  torch::Tensor mask = allowed;
  if (masks.additive_mask().defined()) {
    mask = allowed.defined()
               ? masks.additive_mask().masked_fill(allowed.logical_not(), -std::numeric_limits<double>::infinity())
               : masks.additive_mask();
  }

  // Neither version takes a scale on every release: fold it into q (relative to the default 1/sqrt(d_k)).
  torch::Tensor q = query;
  if (options.scale()) q = query * (*options.scale() * std::sqrt(static_cast<double>(query.size(-1))));

  // An undefined tensor would convert to an optional that holds it, which LibTorch then trips over.
  const c10::optional<torch::Tensor> attn_mask = mask.defined() ? c10::optional<torch::Tensor>(mask) : c10::nullopt;
#if TORCH_VERSION_MAJOR >= 2
  torch::Tensor out = at::scaled_dot_product_attention(q, key, value, attn_mask, options.dropout(), native_causal);
#else
  torch::Tensor out = std::get<0>(at::_scaled_dot_product_attention(q, key, value, attn_mask, options.dropout(),
                                                                     /*need_attn_weights=*/false, native_causal));
#endif
  if (!mask.defined()) return out;
  // A query with no allowed key: LibTorch gives NaN there; attn's contract is a zero row. This is a
  // device-side fill, no host synchronisation.
  const torch::Tensor row_blocked =
      (mask.scalar_type() == at::kBool ? mask.logical_not() : mask.isneginf()).all(-1, /*keepdim=*/true);
  return out.masked_fill(row_blocked, 0.0);
}

}  // namespace attn::detail
