#pragma once
// The three backends, on inputs the front door has validated. dispatch.cpp is their only caller, except for
// packed sequences, which varlen.cpp hands to the fused kernel itself.

#include <attn/options.h>

#include <torch/types.h>

#include <string>
#include <tuple>

namespace attn::backends {

/// Backend::Math: materialises the scores; returns (output, weights), weights only when `need_weights`.
std::tuple<torch::Tensor, torch::Tensor> math_attention(const torch::Tensor& query, const torch::Tensor& key,
                                                        const torch::Tensor& value, const SdpaOptions& options,
                                                        bool need_weights);
/// Backend::Fused: the attn::flash_attention op.
torch::Tensor fused_attention(const torch::Tensor& query, const torch::Tensor& key, const torch::Tensor& value,
                              const SdpaOptions& options);
/// Backend::Fused over packed sequences: query [total_q, H, d_k], key and value [total_k, H_kv, d], validated
/// by backends/varlen_attention.h.
torch::Tensor fused_varlen_attention(const torch::Tensor& query, const torch::Tensor& key, const torch::Tensor& value,
                                     const torch::Tensor& cu_seqlens_q, const torch::Tensor& cu_seqlens_k,
                                     const SdpaOptions& options);
/// Backend::Torch: LibTorch's scaled_dot_product_attention.
torch::Tensor torch_attention(const torch::Tensor& query, const torch::Tensor& key, const torch::Tensor& value,
                              const SdpaOptions& options);
/// Which of its kernels LibTorch's SDPA runs for torch_attention's call: "flash", "efficient", "cudnn", "math"
/// (LibTorch >= 2.5 says; older ones do not).
std::string torch_sdpa_kernel(const torch::Tensor& query, const torch::Tensor& key, const torch::Tensor& value,
                              const SdpaOptions& options);

}  // namespace attn::backends
