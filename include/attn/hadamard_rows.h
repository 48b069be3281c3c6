#pragma once
// The rotation an int8 KV cache stores its rows in.

#include <torch/types.h>

namespace attn {

/// The rotation an int8 cache (KVCache or PagedKVCache of dtype torch::kInt8) applies to each key and value row
/// before it quantizes it: the orthonormal Walsh–Hadamard transform H over the last dimension d, in blocks of
/// the largest power of two that divides d (all of d for 64 or 128). H[i][j] = (-1)^popcount(i & j) / sqrt(n)
/// within a block of n. H is symmetric and its own inverse, so q·k = (H·q)·(H·k): the int8 rows of
/// cache.keys(layer) times their scales stand for hadamard_rows(k), and a caller reading them with
/// ops::decode_attention passes hadamard_rows(query) and applies hadamard_rows to the output.
/// attention_with_kv_cache, attention_over_token_tree and the modules do both. x: float32, float64, bfloat16 or
/// float16 on the CPU, not requiring a gradient (it computes none). Returns float32 (float64 for a float64 x),
/// contiguous, computed in that dtype: a row of elements near float32's largest may overflow to infinity.
torch::Tensor hadamard_rows(const torch::Tensor& x);

}  // namespace attn
