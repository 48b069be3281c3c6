#pragma once
// The functional core's front-door checks: what every backend may assume about q, k, v and the options.

#include <attn/options.h>

#include <torch/types.h>

namespace attn::backends {

/// Validates q, k, v and the options; `fn` names the caller in error messages.
void check_sdpa_inputs(const char* fn, const torch::Tensor& query, const torch::Tensor& key,
                       const torch::Tensor& value, const SdpaOptions& options);

/// Validates the window, softcap, alibi_slopes and sinks of `options` for a query with `heads` heads; alibi
/// slopes may also be [batch, heads] (batch < 0: not allowed).
void check_score_options(const char* fn, const torch::Tensor& query, const SdpaOptions& options, int64_t heads,
                         int64_t batch);

}  // namespace attn::backends
