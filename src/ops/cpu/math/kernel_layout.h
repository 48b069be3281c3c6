#pragma once
// The tensor layout the CPU kernels read through raw pointers, shared by every op: the layout a tensor is
// brought to (row_major_layout) and the strided view the kernels read it through (View4).

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <limits>

namespace attn::ops::cpu {

/// A strided [B, H, rows, cols] view: element (b, h, i, j) is at data[b*sb + h*sh + i*si + j]. Masks use
/// stride 0 to broadcast, and their innermost stride `sj` may be anything.
template <typename T>
struct View4 {
  T* data = nullptr;
  int64_t sb = 0, sh = 0, si = 0, sj = 1;
  T* row(int64_t b, int64_t h, int64_t i) const { return data + b * sb + h * sh + i * si; }
};

/// The kernels need unit stride along d and rows that do not overlap (BLAS and the row loops read them as a
/// matrix). Other layouts, e.g. a stride-0 expanded sequence, are copied; ordinary views pass through untouched.
inline at::Tensor row_major_layout(const at::Tensor& t) {
  const bool unit_d = t.size(-1) <= 1 || t.stride(-1) == 1;
  const bool rows_apart = t.size(-2) <= 1 || t.stride(-2) >= t.size(-1);
  // BLAS takes 32-bit leading dimensions. A larger row stride (possible on a size-1 dimension, which
  // contiguous() leaves as it is) gets a fresh, compact copy.
  const bool fits_blas = t.stride(-2) <= std::numeric_limits<int32_t>::max();
  if (!fits_blas) return t.clone(at::MemoryFormat::Contiguous);
  return unit_d && rows_apart ? t : t.contiguous();
}

}  // namespace attn::ops::cpu
