#include "backends/masks.h"

#include "common/band.h"

#include <ATen/ATen.h>

#include <algorithm>

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

Band band_of(const AttentionOptions& options, int64_t tq, int64_t tk) {
  Band band;
  band.offset = causal_offset(tq, tk, options.causal_alignment());
  band.left = options.window_left();
  band.right = common::band_right(options.causal(), options.window_right());
  return band;
}

torch::Tensor band_blocked(const Band& band, int64_t tq, int64_t tk, const torch::Device& device) {
  if (!band.bounded()) return {};
  auto opts = torch::TensorOptions().dtype(torch::kLong).device(device);
  // j - i - offset: where key j sits relative to query i's diagonal.
  const torch::Tensor distance =
      torch::arange(tk, opts).unsqueeze(0) - torch::arange(tq, opts).unsqueeze(1) - band.offset;
  torch::Tensor blocked;
  if (band.left >= 0) blocked = distance < -band.left;
  if (band.right >= 0) blocked = either(blocked, distance > band.right);
  return blocked;
}

torch::Tensor per_head(const torch::Tensor& values, int64_t rank) {
  std::vector<int64_t> shape(rank, 1);
  // Unbatched [Tq, Tk] scores have one head and no head dim: a single value broadcasts as it is.
  if (rank >= 3) {
    if (values.dim() == 2) {
      // [B, H] values come with 4-D queries only: validation refuses them beside 3-D ones.
      TORCH_INTERNAL_ASSERT(rank >= 4, "per-batch, per-head values for scores of rank ", rank);
      shape[rank - 4] = values.size(0);
    }
    shape[rank - 3] = values.size(-1);
  }
  return values.reshape(shape);
}

torch::Tensor alibi_bias(const torch::Tensor& slopes, int64_t offset, int64_t tq, int64_t tk, int64_t rank,
                         torch::Dtype dtype) {
  auto opts = torch::TensorOptions().dtype(torch::kFloat64).device(slopes.device());
  const torch::Tensor distance =
      (torch::arange(tq, opts).unsqueeze(1) + offset - torch::arange(tk, opts).unsqueeze(0)).abs();
  return (-per_head(slopes.to(torch::kFloat64), rank) * distance).to(dtype);
}

torch::Tensor softcapped(const torch::Tensor& scores, double softcap) {
  return softcap > 0.0 ? at::tanh(scores / softcap) * softcap : scores;
}

bool needs_score_terms(const SdpaOptions& options) {
  return options.softcap() > 0.0 || options.sinks().defined();
}

torch::Tensor blocked_pairs(const SdpaOptions& options, int64_t tq, int64_t tk, const torch::Device& device) {
  const Band band = band_of(options.attention(), tq, tk);
  // Causality is part of the band; blocked_pairs' own causal term is left out to apply it once.
  return either(blocked_pairs(options.masks(), std::nullopt, tq, tk, device), band_blocked(band, tq, tk, device));
}

torch::Tensor cache_blocked(const torch::Tensor& query_starts, const torch::Tensor& key_lengths, int64_t tq,
                            int64_t tk, const AttentionOptions& options) {
  auto opts = torch::TensorOptions().dtype(torch::kLong).device(key_lengths.device());
  const torch::Tensor j = torch::arange(tk, opts).view({1, 1, 1, tk});
  torch::Tensor blocked = j >= key_lengths.view({-1, 1, 1, 1});
  // The band around each query's own position: a Band with the positions as the diagonal.
  const Band band = band_of(options, tq, tk);
  if (band.bounded()) {
    const torch::Tensor position = query_starts.view({-1, 1, 1, 1}) + torch::arange(tq, opts).view({1, 1, tq, 1});
    if (band.left >= 0) blocked = blocked.logical_or(j < position - band.left);
    if (band.right >= 0) blocked = blocked.logical_or(j > position + band.right);
  }
  return blocked.expand({key_lengths.size(0), 1, tq, tk});
}

torch::Tensor cache_alibi_bias(const torch::Tensor& slopes, const torch::Tensor& query_starts, int64_t tq,
                               int64_t tk, torch::Dtype dtype) {
  auto opts = torch::TensorOptions().dtype(torch::kFloat64).device(slopes.device());
  const torch::Tensor position = query_starts.to(opts).view({-1, 1, 1, 1}) + torch::arange(tq, opts).view({1, 1, tq, 1});
  const torch::Tensor distance = (position - torch::arange(tk, opts).view({1, 1, 1, tk})).abs();
  return (-per_head(slopes.to(torch::kFloat64), 4) * distance).to(dtype);
}

torch::Tensor rows_without_keys(const torch::Tensor& blocked) { return blocked.all(-1, /*keepdim=*/true); }

}  // namespace attn::backends
