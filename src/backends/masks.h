#pragma once
// The one definition of which (query, key) pairs are blocked. Every backend takes its masking from here:
// Math and Torch build their masks with these functions, Fused passes causal_offset() to the op, and the
// TorchScript export (src/jit/torchscript/attention.py) is tested against blocked_pairs().
//
// A pair (i, j) is blocked when any of these holds:
//   key_padding_mask[..., j] is true           (j is padding)
//   attend_mask[..., i, j] is false            (i may not attend to j)
//   additive_mask[..., i, j] is -inf           (blocked outright, so a NaN score there is replaced, not summed)
//   causal and j > i + causal_offset(Tq, Tk)   (j lies after i; see CausalAlignment)
//   outside the window band                    (j < i + o - left or j > i + o + right; see Band)
// A query whose every key is blocked gets a zero output row.
//
// The scores of the allowed pairs, in order (every backend and the fused kernel apply them in this order):
//   s = scale · q·k;  s = softcap · tanh(s / softcap);  s -= slope_h · |i + o - j|  (ALiBi);  s += additive
// and a sink σ_h joins each row's softmax denominator: p_ij = exp(s_ij) / (exp(σ_h) + Σ_j exp(s_ij)).

#include <attn/options.h>

#include <torch/types.h>

#include <optional>

namespace attn::backends {

/// Key j is causally allowed for query i iff j <= i + causal_offset: Tk - Tq bottom-right, 0 top-left.
int64_t causal_offset(int64_t tq, int64_t tk, CausalAlignment alignment);

/// The keys each query may see, relative to its diagonal j = i + offset: offset - left <= j - i <= offset + right,
/// a side unbounded when its bound is -1. Causality is right = min(right, 0). This is what the fused kernel
/// receives (ops/flash_attention.h: window_left, window_right, is_causal and causal_offset).
struct Band {
  int64_t offset = 0;
  int64_t left = -1, right = -1;
  bool bounded() const { return left >= 0 || right >= 0; }
};

/// The band of `options` (causal and window) for Tq queries and Tk keys.
Band band_of(const AttentionOptions& options, int64_t tq, int64_t tk);

/// [Tq, Tk] bool, true where key j lies outside `band`; undefined when the band bounds nothing.
torch::Tensor band_blocked(const Band& band, int64_t tq, int64_t tk, const torch::Device& device);

/// Per-head values ([H], or [B, H] for rank >= 4) viewed to broadcast against scores of rank `rank`
/// ([..., B, H, Tq, Tk]): heads at dim -3, rows at dim -4. Unbatched [Tq, Tk] scores hold one head.
torch::Tensor per_head(const torch::Tensor& values, int64_t rank);

/// The ALiBi bias -slope · |i + offset - j| in `dtype`, for slopes [H] or [B, H], with the scores' rank.
torch::Tensor alibi_bias(const torch::Tensor& slopes, int64_t offset, int64_t tq, int64_t tk, int64_t rank,
                         torch::Dtype dtype);

/// softcap · tanh(scores / softcap), or the scores themselves when softcap is 0.
torch::Tensor softcapped(const torch::Tensor& scores, double softcap);

/// Whether `options` use a score term that only Math and Fused compute (softcap, sinks).
bool needs_score_terms(const SdpaOptions& options);

/// [Tq, Tk] bool, true where key j comes after query i.
torch::Tensor causal_blocked(int64_t tq, int64_t tk, CausalAlignment alignment, const torch::Device& device);

/// Every blocked pair as one bool mask broadcastable to [..., Tq, Tk] (true = blocked); undefined when no pair
/// is blocked. `causal` is the alignment to apply, or nullopt for none. The masks are the validated ones of the
/// functional core: key_padding_mask broadcasts to [..., Tk], the others to [..., Tq, Tk].
torch::Tensor blocked_pairs(const AttentionMasks& masks, std::optional<CausalAlignment> causal, int64_t tq,
                            int64_t tk, const torch::Device& device);

/// blocked_pairs of `options`: its masks, causality and window.
torch::Tensor blocked_pairs(const SdpaOptions& options, int64_t tq, int64_t tk, const torch::Device& device);

/// The causal alignment `options` ask for, or nullopt when they are not causal.
inline std::optional<CausalAlignment> causal_of(const SdpaOptions& options) {
  return options.causal() ? std::optional<CausalAlignment>(options.causal_alignment()) : std::nullopt;
}

/// A KV cache's rule (attention_with_kv_cache): query t of batch row b sits at position p = query_starts[b] + t,
/// and key j is blocked for it when j >= key_lengths[b] (not written), or when it lies outside the band of
/// `options` around j = p (causal: j > p; window: j < p - left or j > p + right).
/// [B, 1, Tq, Tk] bool, true = blocked; query_starts and key_lengths are [B] int64 on `device`. The decode
/// kernel (ops/cpu/decode/decode_kernel.h) applies this rule itself, through key_band() there.
torch::Tensor cache_blocked(const torch::Tensor& query_starts, const torch::Tensor& key_lengths, int64_t tq,
                            int64_t tk, const AttentionOptions& options);

/// [B, H, Tq, Tk] ALiBi bias -slope · |p - j| of a KV cache's queries at positions p = query_starts[b] + t.
torch::Tensor cache_alibi_bias(const torch::Tensor& slopes, const torch::Tensor& query_starts, int64_t tq,
                               int64_t tk, torch::Dtype dtype);

/// [..., Tq, 1] bool: the queries for which `blocked` (from blocked_pairs) leaves no key.
torch::Tensor rows_without_keys(const torch::Tensor& blocked);

}  // namespace attn::backends
