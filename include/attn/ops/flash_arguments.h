#pragma once
// attn::ops::FlashArguments: the settings of an attn::flash_attention call besides query, key and value
// (<attn/ops/flash_attention.h>), one value from the caller to the kernels.

#include <c10/core/SymInt.h>
#include <torch/types.h>

#include <cstdint>

namespace attn::ops {

/// A flash_attention call's settings besides query, key and value: the op's other arguments, named, in the
/// order of its schema.
///
///   key_padding_mask  bool, broadcastable to [B, H, Tk]; true = padding (no query attends to that key)
///   attend_mask       bool, broadcastable to [B, H, Tq, Tk]; true = may attend
///   additive_mask     floating, broadcastable to [B, H, Tq, Tk]; added to the scaled scores, -inf blocks
///   is_causal         key j is allowed for query i only if j <= i + causal_offset
///                     (causal_offset = Tk - Tq aligns bottom-right, 0 top-left), within -2^60 .. 2^60. A
///                     c10::SymInt, as the schema's, so that a trace (torch.compile, torch.export) keeps Tk - Tq
///                     symbolic: one graph serves a cache of any length. Kernels read it with .expect_int().
///   scale             multiplies q·k; default 1 / sqrt(d_k)
///   window_left/right key j allowed for query i only if i + o - left <= j <= i + o + right (o = causal_offset,
///                     or each packed sequence's own); -1 unbounded (as is any window of 2^61 or more, which
///                     reaches every key). is_causal bounds the right side at 0.
///   softcap           > 0: the scaled scores s become softcap · tanh(s / softcap), before the bias and masks
///   alibi_slopes      [H] or [B, H] (packed: [N, H]): the bias -slope · |i + o - j|; no gradient
///   sinks             [H]: one logit per head in every row's softmax denominator; differentiable
///   cu_seqlens_q/k    [N + 1] int64 on the CPU: packed sequences (B = 1; no masks, causal_offset 0). Sequence s
///                     is query rows cu_seqlens_q[s] .. [s+1] against key rows cu_seqlens_k[s] .. [s+1], with
///                     its own bottom-right diagonal o = len_k - len_q, as flash_attn_varlen_func.
struct FlashArguments {
  c10::optional<torch::Tensor> key_padding_mask, attend_mask, additive_mask;
  bool is_causal = false;
  c10::SymInt causal_offset = 0;
  c10::optional<double> scale;
  int64_t window_left = -1, window_right = -1;
  double softcap = 0.0;
  c10::optional<torch::Tensor> alibi_slopes, sinks, cu_seqlens_q, cu_seqlens_k;

  /// Whether any of the three masks is given (a defined tensor).
  bool has_masks() const;
  bool has_alibi() const;
  bool has_sinks() const;
  /// Whether the call packs sequences (cu_seqlens_q given).
  bool packed() const;
};

}  // namespace attn::ops
