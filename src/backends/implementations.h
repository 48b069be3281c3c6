#pragma once
// The three backends, on inputs the front door has validated. dispatch.cpp is their only caller.

#include <attn/options.h>

#include <torch/types.h>

#include <tuple>

namespace attn::backends {

/// Backend::Math: materialises the scores; returns (output, weights), weights only when `need_weights`.
std::tuple<torch::Tensor, torch::Tensor> math_attention(const torch::Tensor& query, const torch::Tensor& key,
                                                        const torch::Tensor& value, const SdpaOptions& options,
                                                        bool need_weights);
/// Backend::Fused: the attn::flash_attention op.
torch::Tensor fused_attention(const torch::Tensor& query, const torch::Tensor& key, const torch::Tensor& value,
                              const SdpaOptions& options);
/// Backend::Torch: LibTorch's scaled_dot_product_attention.
torch::Tensor torch_attention(const torch::Tensor& query, const torch::Tensor& key, const torch::Tensor& value,
                              const SdpaOptions& options);

}  // namespace attn::backends
