#pragma once
// The fused attention operator, `attn::flash_attention`, called through the PyTorch dispatcher: attn's CPU
// kernel, and on CUDA the attention variants (flash_attention_support below says which calls). From Python or
// TorchScript: torch.ops.load_library("libattn.so"); torch.ops.attn.flash_attention(...).
//
// Most code wants attn::scaled_dot_product_attention (which picks this op where it applies); call the op
// directly to control every argument or to get the log-sum-exp.

#include <torch/types.h>

#include <string>
#include <tuple>

namespace attn::ops {

/// A flash_attention call's settings besides query, key and value: the op's other arguments, named, in the
/// order of its schema.
///
///   key_padding_mask  bool, broadcastable to [B, H, Tk]; true = padding (no query attends to that key)
///   attend_mask       bool, broadcastable to [B, H, Tq, Tk]; true = may attend
///   additive_mask     floating, broadcastable to [B, H, Tq, Tk]; added to the scaled scores, -inf blocks
///   is_causal         key j is allowed for query i only if j <= i + causal_offset
///                     (causal_offset = Tk - Tq aligns bottom-right, 0 top-left)
///   scale             multiplies q·k; default 1 / sqrt(d_k)
///   window_left/right key j allowed for query i only if i + o - left <= j <= i + o + right (o = causal_offset,
///                     or each packed sequence's own); -1 unbounded. is_causal bounds the right side at 0.
///   softcap           > 0: the scaled scores s become softcap · tanh(s / softcap), before the bias and masks
///   alibi_slopes      [H] or [B, H] (packed: [N, H]): the bias -slope · |i + o - j|; no gradient
///   sinks             [H]: one logit per head in every row's softmax denominator; differentiable
///   cu_seqlens_q/k    [N + 1] int64 on the CPU: packed sequences (B = 1; no masks, causal_offset 0). Sequence s
///                     is query rows cu_seqlens_q[s] .. [s+1] against key rows cu_seqlens_k[s] .. [s+1], with
///                     its own bottom-right diagonal o = len_k - len_q, as flash_attn_varlen_func.
struct FlashArguments {
  c10::optional<torch::Tensor> key_padding_mask, attend_mask, additive_mask;
  bool is_causal = false;
  int64_t causal_offset = 0;
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

/// Fused attention: softmax(q kᵀ · scale + masks) v, computed tile by tile with an online softmax, so the
/// [Tq, Tk] scores never exist in memory. Differentiable with respect to q, k, v and the sinks (the backward
/// pass recomputes the tiles from the log-sum-exp).
///
///   query [B, H, Tq, d_k], key [B, H_kv, Tk, d_k], value [B, H_kv, Tk, d_v], H_kv dividing H: float32, float64
///   or bfloat16 on the CPU; float16 or bfloat16 on CUDA, for the calls flash_attention_support takes.
///
/// bfloat16 inputs are computed in float32 and the output rounded back.
/// Returns (output [B, H, Tq, d_v], logsumexp [B, H, Tq]) where logsumexp is float32 (float64 for float64
/// inputs), the sink included. A query with no allowed key gets a zero output row and logsumexp = -inf (the
/// sink's logit, with sinks).
std::tuple<torch::Tensor, torch::Tensor> flash_attention(const torch::Tensor& query, const torch::Tensor& key,
                                                         const torch::Tensor& value,
                                                         const FlashArguments& arguments = {});

/// The gradients (d query, d key, d value, d sinks) of flash_attention, given its output and logsumexp and the
/// same arguments. d sinks is [H] in the sinks' dtype, or an empty tensor without sinks.
std::tuple<torch::Tensor, torch::Tensor, torch::Tensor, torch::Tensor> flash_attention_backward(
    const torch::Tensor& grad_output, const torch::Tensor& query, const torch::Tensor& key,
    const torch::Tensor& value, const torch::Tensor& output, const torch::Tensor& logsumexp,
    const FlashArguments& arguments = {});

/// Whether flash_attention has a kernel for a call on these tensors' device, forward and backward, and which.
/// On the CPU: float32, float64 and bfloat16, everything, both ways. On CUDA, where attn was built with its CUDA
/// kernels and the GPU has compute capability 8.0 or newer, float16 and bfloat16 without masks, d_k = d_v a
/// multiple of 8 up to 256: LibTorch's kernels for windows, sinks and packed sequences with the diagonal aligned
/// bottom-right (FlashAttention-2; for sinks alone, the SDPA kernel that returns the log-sum-exp), forward and
/// backward; attn's own kernel for soft-capping, ALiBi or another alignment (d = 64 or 128, forward only).
/// attn::scaled_dot_product_attention asks this and takes the general backends where it says no.
struct FlashKernelSupport {
  bool forward = false;
  bool backward = false;
  std::string route;   ///< "cpu", "cuda:libtorch" (LibTorch's kernels) or "cuda:attn"; empty without a kernel
  std::string reason;  ///< what is missing, where forward or backward is false
};
FlashKernelSupport flash_attention_support(const torch::Tensor& query, const torch::Tensor& key,
                                           const torch::Tensor& value, const FlashArguments& arguments);

}  // namespace attn::ops
