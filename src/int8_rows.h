#pragma once
// The int8 form of a KV cache's rows, one definition for KVCache and PagedKVCache.

#include <torch/types.h>

namespace attn {

/// A cache row as it is stored: the rows themselves, or for an int8 cache int8 rows and their scales.
struct StoredRows {
  torch::Tensor rows, scales;
};

/// x [..., d] as an int8 cache stores it: per row (token, head), scale s = max|x| / 127 (float32) and elements
/// round(x / s) in [-127, 127]; an all-zero row has s = 0. Symmetric per row, as llama.cpp's q8_0 is per block
/// of 32: a head's row is the unit the decode kernel reads, so one scale per row costs one multiply per score.
/// Throws, naming `fn` and `arg`, when x holds a non-finite value, which int8 cannot store.
StoredRows quantize_rows(const char* fn, const char* arg, const torch::Tensor& x);

}  // namespace attn
