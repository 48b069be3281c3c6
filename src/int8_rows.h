#pragma once
// The int8 form of a KV cache's rows, one definition for KVCache and PagedKVCache.

#include <attn/options.h>

#include "ops/attention_contract.h"

#include <torch/types.h>

#include <vector>

namespace attn {

/// A cache row as it is stored: the rows themselves, or for an int8 cache int8 rows and their scales.
struct StoredRows {
  torch::Tensor rows, scales;
};

/// x [..., d] as an int8 cache stores it: each row (token, head) rotated, r = hadamard_rows(x), then scale
/// s = max|r| / 127 (float32) and elements round(r / s) in [-127, 127]; an all-zero row has s = 0.
/// Symmetric per row, as llama.cpp's q8_0 is per block of 32: a head's row is the unit the decode kernel reads,
/// so one scale per row costs one multiply per score. The rotation spreads a row's few large channels (keys
/// carry per-channel offsets) over all of them, so the 255 steps are not spent on the outliers alone.
/// Throws, naming `fn` and `arg`, when x holds a non-finite value, or a row whose rotation leaves float32's
/// range.
StoredRows quantize_rows(const char* fn, const char* arg, const torch::Tensor& x);

/// x [B, H_kv, T, d] with the positions past counts[b] (right padding, which a cache never stores) zeroed, so
/// that quantize_rows checks only what is stored; x itself where every row is whole.
torch::Tensor stored_positions(const torch::Tensor& x, const std::vector<int64_t>& counts);

/// backends::cache_attention over a cache's stored rows. An int8 cache stores H·k and H·v (H = hadamard_rows,
/// orthonormal and its own inverse), so the query goes in as H·q, which leaves every score q·k as it was, and
/// the output comes back as H·(Σ p H·v) = Σ p v, in the query's dtype. The query is rotated in float32, which
/// the int8 kernel reads either way. Any other cache is attended as it is.
torch::Tensor attend_stored_rows(const char* fn, const torch::Tensor& query, const torch::Tensor& key_cache,
                                 const torch::Tensor& value_cache, const torch::Tensor& query_starts,
                                 const torch::Tensor& key_lengths, const SdpaOptions& options,
                                 const ops::DecodeOnlyInputs& decode_only);

}  // namespace attn
