#pragma once
// The implementation behind attn::scaled_dot_product_attention, for callers that have validated their
// inputs already (the modules check at their own front door, in their own terms).

#include <attn/options.h>

#include <torch/types.h>

#include <tuple>

namespace attn::detail {

/// Validates q, k, v and the options; `fn` names the caller in error messages.
void check_attention_inputs(const char* fn, const torch::Tensor& query, const torch::Tensor& key,
                            const torch::Tensor& value, const SdpaOptions& options);

/// Attention on validated inputs, by the backend that options.backend() resolves to (resolve_backend).
/// The weights are computed only when `need_weights` (else undefined). `fn` names the caller in errors.
std::tuple<torch::Tensor, torch::Tensor> attention(const char* fn, const torch::Tensor& query, const torch::Tensor& key,
                                                   const torch::Tensor& value, const SdpaOptions& options,
                                                   bool need_weights);

/// The backend that will run: options.backend(), or Auto's choice; refuses a backend that cannot do what is
/// asked (weights, dropout, device, dtype), naming what to use instead. `fn` names the caller.
Backend resolve_backend(const char* fn, const torch::Tensor& query, const SdpaOptions& options, bool need_weights);

/// The three backends, on validated inputs.
std::tuple<torch::Tensor, torch::Tensor> math_attention(const torch::Tensor& query, const torch::Tensor& key,
                                                        const torch::Tensor& value, const SdpaOptions& options,
                                                        bool need_weights);
torch::Tensor fused_attention(const torch::Tensor& query, const torch::Tensor& key, const torch::Tensor& value,
                              const SdpaOptions& options);
torch::Tensor torch_attention(const torch::Tensor& query, const torch::Tensor& key, const torch::Tensor& value,
                              const SdpaOptions& options);

}  // namespace attn::detail
