#pragma once
// The functional core: scaled dot-product attention on already-projected q, k, v.

#include <attn/kv_cache.h>
#include <attn/ops/linear_rows.h>
#include <attn/options.h>
#include <attn/paged_kv_cache.h>
#include <attn/token_tree.h>

#include <torch/types.h>

#include <string>
#include <tuple>

namespace attn {

/// softmax(q kᵀ · scale + masks) v.
///
///   query [..., Tq, d_k], key [..., Tk, d_k], value [..., Tk, d_v]  ->  [..., Tq, d_v]
///
/// The leading dimensions ("...", e.g. [B, H]) must be equal in all three, except for grouped-query and
/// multi-query attention: key and value may have H_kv heads (dimension -3) where H_kv divides the query's H
/// heads, and query head h then attends with key/value head h / (H / H_kv), as
/// `F.scaled_dot_product_attention(enable_gqa=True)` does. No backend copies the shared heads. Masks stay in
/// the query's layout ([..., H, Tq, Tk]). d_v may differ from d_k.
/// Floating types only, all three the same dtype and device. See AttentionMasks for the mask conventions
/// and SdpaOptions for causal alignment, scale and dropout.
torch::Tensor scaled_dot_product_attention(const torch::Tensor& query, const torch::Tensor& key,
                                           const torch::Tensor& value, const SdpaOptions& options = {});

/// As scaled_dot_product_attention, and also returns the attention weights [..., Tq, Tk]: the
/// probabilities actually applied to the values (after dropout, as torch.nn.MultiheadAttention returns
/// them). Fully masked rows have all-zero weights.
std::tuple<torch::Tensor, torch::Tensor> scaled_dot_product_attention_with_weights(
    const torch::Tensor& query, const torch::Tensor& key, const torch::Tensor& value,
    const SdpaOptions& options = {});

/// Attention of new queries over a KV cache, read in place (flash_attn_with_kvcache's role; attn::KVCache
/// holds such caches, and MultiHeadAttention::forward_with_cache(x, cache, layer) calls this after appending).
///
///   query [B, H, Tq, d_k], key_cache [B, H_kv, capacity, d_k], value_cache [B, H_kv, capacity, d_v]
///   query_starts [B], key_lengths [B]: integers, any device
///
/// Query t of row b sits at position query_starts[b] + t; it attends the keys j < key_lengths[b], and when
/// options.causal() only those with j <= query_starts[b] + t. Rows may differ in both (a ragged batch needs no
/// padding mask). H_kv may divide H (grouped-query attention). options.masks() must be empty; the scale,
/// dropout and backend apply as in scaled_dot_product_attention. Backend::Auto (or Fused) runs the split-KV
/// decode kernel for Tq <= 16 on the CPU when no gradient is needed, else the usual choice on the caches'
/// used prefix. Returns [B, H, Tq, d_v]; a query with no allowed key gets a zero row. Positions at or past
/// key_lengths[b] are read by neither the decode kernel, Math nor Fused; LibTorch's kernels (Backend::Torch, and
/// Auto on a GPU) weight them by zero, so there they must be finite (a KVCache zeroes the positions it drops).
torch::Tensor attention_with_kv_cache(const torch::Tensor& query, const torch::Tensor& key_cache,
                                      const torch::Tensor& value_cache, const torch::Tensor& query_starts,
                                      const torch::Tensor& key_lengths, const SdpaOptions& options = {});

/// The same over layer `layer` of a KVCache: its keys, values and lengths, and an int8 cache's scales (an int8
/// cache is read by the CPU decode kernel, for any Tq, without a gradient).
torch::Tensor attention_with_kv_cache(const torch::Tensor& query, const KVCache& cache, int64_t layer,
                                      const torch::Tensor& query_starts, const SdpaOptions& options = {});

/// The same over a PagedKVCache: `batch` (cache.batch(layer, sequences), made after the step's append) names
/// the layer and the sequences, query row b being sequences[b]'s. The decode kernel reads the blocks in place,
/// for any Tq, without a gradient. A batch made before the cache last changed is refused as stale.
torch::Tensor attention_with_kv_cache(const torch::Tensor& query, const PagedKVCache& cache, const PagedBatch& batch,
                                      const torch::Tensor& query_starts, const SdpaOptions& options = {});

/// Token tree verification (speculative decoding) over layer `layer` of a KVCache whose last tree.size()
/// positions of every row hold the tree's candidates (appended in the tree's order): query [B, H, N, d_k], one
/// row per candidate; candidate t attends every position before the candidates, its ancestors and itself.
/// Returns [B, H, N, d_v]. options must be causal, without a window or ALiBi; the decode kernel computes it
/// (CPU, no gradient). MultiHeadAttentionImpl::forward_with_tree is the module's form.
torch::Tensor attention_over_token_tree(const torch::Tensor& query, const KVCache& cache, int64_t layer,
                                        const TokenTree& tree, const SdpaOptions& options = SdpaOptions().causal(true));

/// Attention over a packed batch of variable-length sequences, as FlashAttention's flash_attn_varlen_func:
///
///   query [total_q, H, d_k], key [total_k, H_kv, d_k], value [total_k, H_kv, d_v]  ->  [total_q, H, d_v]
///   cu_seqlens_q, cu_seqlens_k: [N + 1] integers on the CPU, 0 first, non-decreasing, total last
///   max_seqlen_q, max_seqlen_k: at least the longest query and key sequence
///
/// Sequence s holds query rows cu_seqlens_q[s] .. cu_seqlens_q[s+1] and key rows cu_seqlens_k[s] ..
/// cu_seqlens_k[s+1], and its queries attend to its own keys only. Causality, the window and ALiBi apply per
/// sequence, with each sequence's own diagonal (bottom-right: o = len_k - len_q; top-left only where every
/// sequence has len_q == len_k). alibi_slopes may be [H] or [N, H]; options.masks() must be empty. The fused
/// kernel never visits a tile across two sequences; the other backends run the sequences one by one. Pack and
/// unpack padded batches with attn::pack_padded and attn::unpack_padded (attn/varlen.h).
torch::Tensor varlen_attention(const torch::Tensor& query, const torch::Tensor& key, const torch::Tensor& value,
                               const torch::Tensor& cu_seqlens_q, const torch::Tensor& cu_seqlens_k,
                               int64_t max_seqlen_q, int64_t max_seqlen_k, const SdpaOptions& options = {});

/// x · weightᵀ + bias, as at::linear (input [..., in], weight [out, in], bias [out] or undefined ->
/// [..., out]), with the product that suits a decoding step: for one row, or up to ops::kLinearRowsMax rows of
/// 4096 elements in all, on the CPU in float32 or bfloat16 with no gradient recorded, attn::ops::linear_rows,
/// which streams the weight once at close to the memory's rate; otherwise at::linear. On an x86 CPU without
/// AVX-512, where LibTorch has no bfloat16 GEMM of its own (cpu_kernel_info().bfloat16_linear is "widened"),
/// bfloat16 takes linear_rows for up to ops::kLinearRowsMax rows of any width, and more rows (or a recorded
/// gradient) run at::linear in float and are rounded to bfloat16 once. On an x86 CPU with AVX-512 but without
/// AVX512-BF16, where LibTorch's bfloat16 GEMM converts every element itself, bfloat16 also takes linear_rows
/// for up to ops::kLinearRowsMax rows of any width. On an x86 CPU whose AVX512-BF16 measures slower than its
/// float FMA and that has no AMX (cpu_kernel_info().bfloat16_linear is "widened_many"), bfloat16 of 128 rows or
/// more without a recorded gradient runs the float GEMM on widened operands, rounded to bfloat16 once. The
/// modules' projections take the same route. Use it for a model's other layers (MLP, LM head).
torch::Tensor linear(const torch::Tensor& input, const torch::Tensor& weight, const torch::Tensor& bias = {});

/// linear(input, weights[k], biases[k]) for each weight (biases empty: none; an undefined entry: none for that
/// weight): the products that share an input, such as an MLP's gate and up projections. Where each of them
/// would take attn::ops::linear_rows, they run as one attn::ops::linear_rows_many, one pass over all the
/// weights, which on a decoding step's short weights is faster than a pass each (bench/RESULTS.md).
std::vector<torch::Tensor> linear_many(const torch::Tensor& input, const std::vector<torch::Tensor>& weights,
                                       const std::vector<torch::Tensor>& biases = {});

/// The standard ALiBi slopes for `num_heads` heads (Press et al.; BLOOM's build_alibi_tensor and MPT use the
/// same): 2^(-8i/n) for i = 1..n with n the power of two <= num_heads, then the odd multiples of the next
/// power of two's slopes for the remaining heads. [num_heads] float32 on the CPU.
torch::Tensor alibi_slopes(int64_t num_heads);

/// The backend that scaled_dot_product_attention (or `_with_weights`, when `need_weights`) would run for
/// this query and these options: options.backend(), or what Backend::Auto picks. Throws, as the call would,
/// when the requested backend cannot serve the request (e.g. Backend::Fused with weights or dropout).
/// Key and value are taken to be shaped like the query (self-attention); the overload below takes them.
Backend resolved_backend(const torch::Tensor& query, const SdpaOptions& options = {}, bool need_weights = false);
Backend resolved_backend(const torch::Tensor& query, const torch::Tensor& key, const torch::Tensor& value,
                         const SdpaOptions& options = {}, bool need_weights = false);

/// What computes scaled_dot_product_attention (or `_with_weights`) for these inputs, in one line: the backend
/// and the kernel behind it. "fused (cpu)" is attn's CPU kernel; "fused (cuda:libtorch)" the variants on
/// LibTorch's kernels and "fused (cuda:attn)" on attn's own CUDA kernel (ops::flash_attention_support); "torch
/// (flash)", "torch (efficient)", "torch (cudnn)" and "torch (math)" LibTorch's SDPA and the kernel it picks
/// (LibTorch >= 2.5 says which); "math" attn's math backend. Validates the inputs as the call does.
std::string describe_route(const torch::Tensor& query, const torch::Tensor& key, const torch::Tensor& value,
                           const SdpaOptions& options = {}, bool need_weights = false);

/// The same for varlen_attention: the op over the packed rows, or "per sequence: " and one sequence's route.
std::string describe_varlen_route(const torch::Tensor& query, const torch::Tensor& key, const torch::Tensor& value,
                                  const torch::Tensor& cu_seqlens_q, const torch::Tensor& cu_seqlens_k,
                                  int64_t max_seqlen_q, int64_t max_seqlen_k, const SdpaOptions& options = {});

/// The same for attention_with_kv_cache: "decode (cpu)" or "decode (cuda)" for attn's decode kernel, else the
/// route of the general backends on the cache's used prefix.
std::string describe_route_with_kv_cache(const torch::Tensor& query, const torch::Tensor& key_cache,
                                         const torch::Tensor& value_cache, const torch::Tensor& query_starts,
                                         const torch::Tensor& key_lengths, const SdpaOptions& options = {});

}  // namespace attn
