#pragma once
// attn::varlen_attention's checks and its one backend decision: the fused kernel over the packed rows, or the
// general backends one sequence at a time.

#include <attn/options.h>

#include <torch/types.h>

#include <string>

namespace attn::backends {

/// Validates packed q [total_q, H, d_k], k, v [total_k, H_kv, d], the cu_seqlens, the max lengths and the
/// options (no masks; alibi_slopes [H] or [N, H]; top-left alignment only where every len_q == len_k).
void check_varlen_inputs(const char* fn, const torch::Tensor& query, const torch::Tensor& key,
                         const torch::Tensor& value, const torch::Tensor& cu_seqlens_q,
                         const torch::Tensor& cu_seqlens_k, int64_t max_seqlen_q, int64_t max_seqlen_k,
                         const SdpaOptions& options);

/// Attention over the packed sequences, on validated inputs.
torch::Tensor varlen_attention(const char* fn, const torch::Tensor& query, const torch::Tensor& key,
                               const torch::Tensor& value, const torch::Tensor& cu_seqlens_q,
                               const torch::Tensor& cu_seqlens_k, const SdpaOptions& options);

/// What varlen_attention runs for these inputs, as dispatch.h's route() names it: the op over the packed rows, or
/// "per sequence: " and the route of the general backends on one sequence.
std::string varlen_route(const char* fn, const torch::Tensor& query, const torch::Tensor& key,
                         const torch::Tensor& value, const torch::Tensor& cu_seqlens_q,
                         const torch::Tensor& cu_seqlens_k, const SdpaOptions& options);

}  // namespace attn::backends
