#pragma once
// How a KV cache writes new positions into its storage, one definition for KVCache (a row's buffer) and
// PagedKVCache (a block of the pool).

#include <torch/types.h>

#include <cstdint>

namespace attn {

/// Positions [src_start, src_start + count) of src[src_row], written at [dst_start, dst_start + count) of
/// dst[dst_row].
struct PositionRun {
  int64_t dst_row, dst_start, src_row, src_start, count;
};

/// Writes runs of positions from src into dst, both [N, H, positions, ...] (positions along dimension 2: a
/// cache's [B, H, T, d] rows, a pool's [blocks, H, S, d] blocks, an int8 cache's [.., H, T] scales). On the
/// CPU, where both are 4-D of one dtype with unit stride along the last dimension (a projection's heads are),
/// a run is a memmove per head, or per (head, position) where the positions are not adjacent: src may alias dst
/// (a cache's own rows appended again). Anything else takes a tensor copy per run. The way is chosen once, for
/// every run written; the caller has checked the shapes and the ranges, and keeps both tensors alive while it
/// writes.
class PositionWriter {
 public:
  PositionWriter(const torch::Tensor& dst, const torch::Tensor& src);
  void write(const PositionRun& run) const;
  /// Whether the runs are written by memmove (otherwise by a tensor copy each).
  bool by_memmove() const { return by_memmove_; }

 private:
  const torch::Tensor& dst_;
  const torch::Tensor& src_;
  bool by_memmove_ = false, adjacent_ = false;
  char* out_ = nullptr;
  const char* in_ = nullptr;
  int64_t heads_ = 0, row_bytes_ = 0;
  int64_t dst_row_ = 0, dst_head_ = 0, dst_position_ = 0, src_row_ = 0, src_head_ = 0, src_position_ = 0;
};

}  // namespace attn
