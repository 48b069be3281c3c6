#pragma once
// How a KV cache writes new positions into its storage, one definition for KVCache (a row's buffer) and
// PagedKVCache (a block of the pool).

#include <torch/types.h>

#include <cstdint>

namespace attn {

/// Writes positions [src_start, src_start + count) of src[sb] into positions [dst_start, dst_start + count) of
/// dst[db], where dst and src are [N, H, positions, ...] (positions along dimension 2: a cache's [B, H, T, d]
/// rows, a pool's [blocks, H, S, d] blocks, an int8 cache's [.., H, T] scales). On the CPU, where both are 4-D
/// of one dtype with unit stride along the last dimension (a projection's heads are), that is a memmove per
/// head, or per (head, position) where the positions are not adjacent: src may alias dst (a cache's own rows
/// appended again). Anything else takes the tensor copy. The caller has checked the shapes and the ranges.
void copy_positions(const torch::Tensor& dst, int64_t db, int64_t dst_start, const torch::Tensor& src, int64_t sb,
                    int64_t src_start, int64_t count);

}  // namespace attn
