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

torch::Tensor cache_blocked(const torch::Tensor& query_starts, const torch::Tensor& key_lengths, int64_t tq,
                            int64_t tk, bool causal) {
  auto opts = torch::TensorOptions().dtype(torch::kLong).device(key_lengths.device());
  const torch::Tensor j = torch::arange(tk, opts).view({1, 1, 1, tk});
  torch::Tensor blocked = j >= key_lengths.view({-1, 1, 1, 1});
  if (causal) {
    const torch::Tensor position = query_starts.view({-1, 1, 1, 1}) + torch::arange(tq, opts).view({1, 1, tq, 1});
    blocked = blocked.logical_or(j > position);
  }
  return blocked.expand({key_lengths.size(0), 1, tq, tk});
}

torch::Tensor rows_without_keys(const torch::Tensor& blocked) { return blocked.all(-1, /*keepdim=*/true); }

}  // namespace attn::backends
