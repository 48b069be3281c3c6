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

/// Attention on validated inputs. The weights are computed only when `need_weights` (else undefined).
std::tuple<torch::Tensor, torch::Tensor> attention(const torch::Tensor& query, const torch::Tensor& key,
                                                   const torch::Tensor& value, const SdpaOptions& options,
                                                   bool need_weights);

}  // namespace attn::detail
