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
// A query whose every key is blocked gets a zero output row.

#include <attn/options.h>

#include <torch/types.h>

#include <optional>

namespace attn::backends {

/// Key j is causally allowed for query i iff j <= i + causal_offset: Tk - Tq bottom-right, 0 top-left.
int64_t causal_offset(int64_t tq, int64_t tk, CausalAlignment alignment);

/// [Tq, Tk] bool, true where key j comes after query i.
torch::Tensor causal_blocked(int64_t tq, int64_t tk, CausalAlignment alignment, const torch::Device& device);

/// Every blocked pair as one bool mask broadcastable to [..., Tq, Tk] (true = blocked); undefined when no pair
/// is blocked. `causal` is the alignment to apply, or nullopt for none. The masks are the validated ones of the
/// functional core: key_padding_mask broadcasts to [..., Tk], the others to [..., Tq, Tk].
torch::Tensor blocked_pairs(const AttentionMasks& masks, std::optional<CausalAlignment> causal, int64_t tq,
                            int64_t tk, const torch::Device& device);

/// The causal alignment `options` ask for, or nullopt when they are not causal.
inline std::optional<CausalAlignment> causal_of(const SdpaOptions& options) {
  return options.causal() ? std::optional<CausalAlignment>(options.causal_alignment()) : std::nullopt;
}

/// A KV cache's rule (attention_with_kv_cache): query t of batch row b sits at position query_starts[b] + t,
/// and key j is blocked for it when j >= key_lengths[b] (not written), or when causal and j > query_starts[b] + t.
/// [B, 1, Tq, Tk] bool, true = blocked; query_starts and key_lengths are [B] int64 on `device`. The decode
/// kernel (ops/cpu/decode_attention_kernel_impl.h) applies this rule itself, through key_limit() there.
torch::Tensor cache_blocked(const torch::Tensor& query_starts, const torch::Tensor& key_lengths, int64_t tq,
                            int64_t tk, bool causal);

/// [..., Tq, 1] bool: the queries for which `blocked` (from blocked_pairs) leaves no key.
torch::Tensor rows_without_keys(const torch::Tensor& blocked);

}  // namespace attn::backends
