#pragma once
// The one backend decision: resolve options.backend() (Auto included) once, then call that backend.

#include <attn/options.h>

#include <torch/types.h>

#include <tuple>

namespace attn::backends {

/// The backend that will run: options.backend(), or Auto's choice; refuses a backend that cannot do what is
/// asked (weights, dropout, device, dtype), naming what to use instead. `fn` names the caller in errors.
Backend resolve(const char* fn, const torch::Tensor& query, const SdpaOptions& options, bool need_weights);

/// Attention on validated inputs (backends/validate.h, or a module's own checks) by the resolved backend:
/// (output, weights), the weights only when `need_weights` (else undefined).
std::tuple<torch::Tensor, torch::Tensor> attention(const char* fn, const torch::Tensor& query, const torch::Tensor& key,
                                                   const torch::Tensor& value, const SdpaOptions& options,
                                                   bool need_weights);

}  // namespace attn::backends
