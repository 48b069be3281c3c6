#pragma once
// The decode operator, `attn::decode_attention`: a few new queries per sequence against a KV cache, split
// across threads along the keys (FlashDecoding's scheme). Called through the PyTorch dispatcher, like
// attn::flash_attention; most code reaches it through attn::attention_with_kv_cache or
// MultiHeadAttention::forward_with_cache(x, cache, layer), which pick it when it is the faster route.

#include <torch/types.h>

#include <string>

namespace attn::ops {

/// Keys per split of the CPU decode kernel (each task reads one split of one K/V head): 256 for a cache of
/// float32, float64 or bfloat16 rows, 1024 for int8 rows (ops/cpu/decode/decode_args.h says why). A
/// PagedKVCache takes its blocks in runs of this many positions, so that a split lies in adjacent blocks.
inline constexpr int64_t kDecodeSplitKeys = 256;
inline constexpr int64_t kDecodeSplitKeysInt8 = 1024;

/// Attention of query [B, H, Tq, d_k] over the caches key_cache [B, H_kv, capacity, d_k] and value_cache
/// [B, H_kv, capacity, d_v] (H_kv divides H; query head h reads cache head h / (H / H_kv)), read in place.
/// Query t of row b sits at position query_starts[b] + t and may attend key j iff j < key_lengths[b] and,
/// when is_causal, j <= query_starts[b] + t. query_starts and key_lengths are [B] int64 (on the CPU, or on the
/// caches' GPU for the CUDA kernel, which reads them to size its grid); query_starts[b] in [0, 2^60], key_lengths[b]
/// in [0, capacity].
/// float32, float64 or bfloat16 (the caches and the query alike) on the CPU, where bfloat16 is computed in
/// float32; float32, float16 or bfloat16 on CUDA (decode_attention_support below), computed in float32.
/// The variants of attn::flash_attention apply around each query's position p: window_left/right (key j
/// allowed iff p - left <= j <= p + right, -1 unbounded, is_causal bounds right at 0), softcap, alibi_slopes
/// ([H] or [B, H]: bias -slope · |p - j|) and sinks ([H]).
/// On the CPU, three more forms (ops/attention_contract.h, check_cache_call, states each rule):
///  - int8 caches (a KVCache built with dtype torch::kInt8) with key_scales and value_scales, float32
///    [B, H_kv, capacity]: row (b, h, j) stands for scales[b, h, j] times its int8 elements. The kernel widens
///    them in its registers (no float copy of the cache is made); the query is float32 or bfloat16. A
///    KVCache's or PagedKVCache's int8 rows hold the appended rows rotated (attn::hadamard_rows): read directly
///    with this op, they take hadamard_rows(query), and the output is rotated back with hadamard_rows, as
///    attention_with_kv_cache does.
///  - paged caches (PagedKVCache): key_cache [num_blocks, H_kv, block_size, d_k] and value_cache alike hold
///    blocks, and block_table [B, max_blocks] (integers, CPU) says which block holds row b's positions
///    [i · block_size, (i + 1) · block_size).
///  - token tree verification: tree_mask [Tq, Tq] or [B, Tq, Tq] bool; the Tq queries are candidates at
///    positions query_starts[b] + t, and candidate t attends the positions before query_starts[b] and the
///    candidates u with tree_mask[t, u] (its ancestors and itself). Needs is_causal; no window, no ALiBi.
/// Not differentiable: an inference kernel. A query with no allowed key gets a zero row.
torch::Tensor decode_attention(const torch::Tensor& query, const torch::Tensor& key_cache,
                               const torch::Tensor& value_cache, const torch::Tensor& query_starts,
                               const torch::Tensor& key_lengths, bool is_causal = true,
                               c10::optional<double> scale = c10::nullopt, int64_t window_left = -1,
                               int64_t window_right = -1, double softcap = 0.0,
                               const c10::optional<torch::Tensor>& alibi_slopes = c10::nullopt,
                               const c10::optional<torch::Tensor>& sinks = c10::nullopt,
                               const c10::optional<torch::Tensor>& key_scales = c10::nullopt,
                               const c10::optional<torch::Tensor>& value_scales = c10::nullopt,
                               const c10::optional<torch::Tensor>& block_table = c10::nullopt,
                               const c10::optional<torch::Tensor>& tree_mask = c10::nullopt);

}  // namespace attn::ops

namespace attn::ops {

/// Whether decode_attention has a kernel for these tensors on their device, and if not, why. The CPU kernel
/// takes float32, float64 and bfloat16. The CUDA kernel, where attn was built with its CUDA kernels (a CUDA
/// LibTorch and nvcc), takes float32, float16 and bfloat16 on a GPU of compute capability 8.0 or newer, with
/// d_k = d_v <= 256 a multiple of 16 bytes and cache rows that start on 16-byte boundaries (any contiguous
/// cache). attn::attention_with_kv_cache asks this and takes the general backends where it says no.
struct DecodeKernelSupport {
  bool supported = false;
  std::string reason;  ///< empty when supported
};
DecodeKernelSupport decode_attention_support(const torch::Tensor& query, const torch::Tensor& key_cache,
                                             const torch::Tensor& value_cache);

}  // namespace attn::ops
