#pragma once
// Attention over a KV cache: the checks of attention_with_kv_cache and its one backend decision, the decode
// kernel for a few queries or the general backends on the cache's used prefix with the cache rule as a mask.

#include <attn/options.h>

#include "ops/attention_contract.h"

#include <torch/types.h>

#include <string>

namespace attn::backends {

/// Queries per row up to which Backend::Auto and Backend::Fused use the decode kernel (split-KV): beyond it
/// a prefill is compute-bound and the fused kernel's tiles win.
inline constexpr int64_t kDecodeMaxQueries = 16;

/// Checks query [B, H, Tq, d_k], key_cache [B, H_kv, capacity, d_k], value_cache [B, H_kv, capacity, d_v],
/// query_starts and key_lengths ([B] integers; 0 <= key_lengths[b] <= capacity) and the options (no masks:
/// the positions are the masking). What only the decode kernel reads (an int8 cache's scales, a paged cache's
/// block table, a token tree: ops::DecodeOnlyInputs) also needs a CPU query, Backend::Auto or Fused, no dropout
/// and no gradient. A call that the general backends will read is resolved too, so that what the asked backend
/// refuses is refused here. `fn` names the caller in errors.
void check_cache_inputs(const char* fn, const torch::Tensor& query, const torch::Tensor& key_cache,
                        const torch::Tensor& value_cache, const torch::Tensor& query_starts,
                        const torch::Tensor& key_lengths, const SdpaOptions& options,
                        const ops::DecodeOnlyInputs& decode_only = {});

/// Attention on checked inputs by the backend that options.backend() (or Auto) selects for the cache.
torch::Tensor cache_attention(const char* fn, const torch::Tensor& query, const torch::Tensor& key_cache,
                              const torch::Tensor& value_cache, const torch::Tensor& query_starts,
                              const torch::Tensor& key_lengths, const SdpaOptions& options,
                              const ops::DecodeOnlyInputs& decode_only = {});

/// What cache_attention runs for these inputs, as dispatch.h's route() names it, or "decode (cpu|cuda)".
std::string cache_route(const char* fn, const torch::Tensor& query, const torch::Tensor& key_cache,
                        const torch::Tensor& value_cache, const torch::Tensor& query_starts,
                        const torch::Tensor& key_lengths, const SdpaOptions& options);

/// Whether cache_attention would run the decode kernel for this query and these options.
bool uses_decode_kernel(const torch::Tensor& query, const torch::Tensor& key_cache, const torch::Tensor& value_cache,
                        const SdpaOptions& options, const ops::DecodeOnlyInputs& decode_only = {});

}  // namespace attn::backends
