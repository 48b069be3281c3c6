#include "backends/masks.h"

#include <ATen/ATen.h>

namespace attn::backends {
namespace {

torch::Tensor either(const torch::Tensor& a, const torch::Tensor& b) {
  if (!a.defined()) return b;
  if (!b.defined()) return a;
  return a.logical_or(b);
}

}  // namespace

int64_t causal_offset(int64_t tq, int64_t tk, CausalAlignment alignment) {
  return alignment == CausalAlignment::BottomRight ? tk - tq : 0;
}

torch::Tensor causal_blocked(int64_t tq, int64_t tk, CausalAlignment alignment, const torch::Device& device) {
  auto opts = torch::TensorOptions().dtype(torch::kLong).device(device);
  return torch::arange(tk, opts).unsqueeze(0) > torch::arange(tq, opts).unsqueeze(1) + causal_offset(tq, tk, alignment);
}

torch::Tensor blocked_pairs(const AttentionMasks& masks, std::optional<CausalAlignment> causal, int64_t tq,
                            int64_t tk, const torch::Device& device) {
  torch::Tensor blocked;
  if (masks.key_padding_mask().defined()) blocked = masks.key_padding_mask().unsqueeze(-2);
  if (masks.attend_mask().defined()) blocked = either(blocked, masks.attend_mask().logical_not());
  if (masks.additive_mask().defined()) blocked = either(blocked, masks.additive_mask().isneginf());
  if (causal) blocked = either(blocked, causal_blocked(tq, tk, *causal, device));
  return blocked;
}

torch::Tensor rows_without_keys(const torch::Tensor& blocked) { return blocked.all(-1, /*keepdim=*/true); }

}  // namespace attn::backends
