#include "cache_positions.h"

#include <ATen/ATen.h>

#include <cstring>

namespace attn {

PositionWriter::PositionWriter(const torch::Tensor& dst, const torch::Tensor& src) : dst_(dst), src_(src) {
  by_memmove_ = dst.is_cpu() && src.is_cpu() && dst.dim() == 4 && src.dim() == 4 &&
                dst.scalar_type() == src.scalar_type() && dst.stride(3) == 1 && src.stride(3) == 1;
  if (!by_memmove_) return;
  const int64_t element = static_cast<int64_t>(dst.element_size());
  heads_ = dst.size(1);
  row_bytes_ = dst.size(3) * element;
  dst_row_ = dst.stride(0) * element, dst_head_ = dst.stride(1) * element, dst_position_ = dst.stride(2) * element;
  src_row_ = src.stride(0) * element, src_head_ = src.stride(1) * element, src_position_ = src.stride(2) * element;
  // A head's positions are one piece where both lay them out a row apart.
  adjacent_ = dst_position_ == row_bytes_ && src_position_ == row_bytes_;
  out_ = static_cast<char*>(dst.data_ptr());
  in_ = static_cast<const char*>(src.data_ptr());
}

void PositionWriter::write(const PositionRun& r) const {
  if (r.count <= 0) return;
  if (!by_memmove_) {
    dst_.select(0, r.dst_row).narrow(1, r.dst_start, r.count)
        .copy_(src_.select(0, r.src_row).narrow(1, r.src_start, r.count));
    return;
  }
  char* to = out_ + r.dst_row * dst_row_ + r.dst_start * dst_position_;
  const char* from = in_ + r.src_row * src_row_ + r.src_start * src_position_;
  for (int64_t h = 0; h < heads_; ++h, to += dst_head_, from += src_head_) {
    if (adjacent_) {
      std::memmove(to, from, r.count * row_bytes_);
      continue;
    }
    for (int64_t t = 0; t < r.count; ++t) std::memmove(to + t * dst_position_, from + t * src_position_, row_bytes_);
  }
}

}  // namespace attn
