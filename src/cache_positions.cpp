#include "cache_positions.h"

#include <ATen/ATen.h>

#include <cstring>

namespace attn {

void copy_positions(const torch::Tensor& dst, int64_t db, int64_t dst_start, const torch::Tensor& src, int64_t sb,
                    int64_t src_start, int64_t count) {
  if (count <= 0) return;
  if (!(dst.is_cpu() && src.is_cpu() && dst.dim() == 4 && src.dim() == 4 &&
        dst.scalar_type() == src.scalar_type() && dst.stride(3) == 1 && src.stride(3) == 1)) {
    dst.select(0, db).narrow(1, dst_start, count).copy_(src.select(0, sb).narrow(1, src_start, count));
    return;
  }
  const int64_t heads = dst.size(1), width = dst.size(3), element = static_cast<int64_t>(dst.element_size());
  char* out = static_cast<char*>(dst.data_ptr()) + (db * dst.stride(0) + dst_start * dst.stride(2)) * element;
  const char* in = static_cast<const char*>(src.data_ptr()) + (sb * src.stride(0) + src_start * src.stride(2)) * element;
  // A head's positions are one piece where both lay them out a row apart.
  const bool adjacent = dst.stride(2) == width && src.stride(2) == width;
  for (int64_t h = 0; h < heads; ++h) {
    char* to = out + h * dst.stride(1) * element;
    const char* from = in + h * src.stride(1) * element;
    if (adjacent) {
      std::memmove(to, from, count * width * element);
      continue;
    }
    for (int64_t t = 0; t < count; ++t) {
      std::memmove(to + t * dst.stride(2) * element, from + t * src.stride(2) * element, width * element);
    }
  }
}

}  // namespace attn
