#pragma once
// Packed variable-length batches (attn::varlen_attention): from a padded batch to the packed rows and back,
// and each packed row's position within its own sequence (for rotary embeddings).

#include <torch/types.h>

#include <cstdint>

namespace attn {

/// A padded batch packed row after row: the rows of sequence s are cu_seqlens[s] .. cu_seqlens[s + 1].
struct PackedBatch {
  torch::Tensor data;        ///< [total, ...]: the valid rows of every sequence, in batch order
  torch::Tensor cu_seqlens;  ///< [B + 1] int64 on the CPU: 0, then the running sum of the lengths
  int64_t max_seqlen = 0;    ///< the longest sequence
};

/// Packs `padded` [B, T, ...] whose row b holds lengths[b] <= T valid positions at the front (right padding).
/// lengths: [B] integers, any device. The packed data is a new tensor on padded's device.
PackedBatch pack_padded(const torch::Tensor& padded, const torch::Tensor& lengths);

/// The inverse of pack_padded: [B, max_len, ...] with zeros after each sequence's end. max_len defaults to the
/// longest sequence and must be at least that.
torch::Tensor unpack_padded(const torch::Tensor& packed, const torch::Tensor& cu_seqlens, int64_t max_len = -1);

/// [total] int64 on `device`: each packed row's position within its sequence (0, 1, ..., len - 1, 0, 1, ...),
/// for RotaryEmbedding::forward at explicit positions.
torch::Tensor packed_positions(const torch::Tensor& cu_seqlens, const torch::Device& device = torch::kCPU);

}  // namespace attn
