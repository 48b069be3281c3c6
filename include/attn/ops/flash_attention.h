#pragma once
// The fused attention operator, `attn::flash_attention`, called through the PyTorch dispatcher: attn's CPU
// kernel, and on CUDA the attention variants (flash_attention_support below says which calls). From Python or
// TorchScript: torch.ops.load_library("libattn.so"); torch.ops.attn.flash_attention(...).
//
// Most code wants attn::scaled_dot_product_attention (which picks this op where it applies); call the op
// directly to control every argument or to get the log-sum-exp.

#include <attn/ops/flash_arguments.h>

#include <torch/types.h>

#include <string>
#include <tuple>

namespace attn::ops {

/// Fused attention: softmax(q kᵀ · scale + masks) v, computed tile by tile with an online softmax, so the
/// [Tq, Tk] scores never exist in memory. Differentiable with respect to q, k, v and the sinks (the backward
/// pass recomputes the tiles from the log-sum-exp).
///
///   query [B, H, Tq, d_k], key [B, H_kv, Tk, d_k], value [B, H_kv, Tk, d_v], H_kv dividing H: float32, float64,
///   bfloat16 or float16 on the CPU; float16 or bfloat16 on CUDA, for the calls flash_attention_support takes.
///
/// bfloat16 and float16 inputs are computed in float32 and the output rounded back.
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
/// On the CPU: float32, float64, bfloat16 and float16, everything, both ways. On CUDA, where attn was built with
/// its CUDA kernels and the GPU has compute capability 8.0 or newer, float16 and bfloat16 without masks, d_k = d_v a
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
