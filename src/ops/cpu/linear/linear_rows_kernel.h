// The few-row linear kernel (attn::linear_rows), compiled once per instruction set (ops/cpu/variant_*.cpp).
// No include guard on purpose: each variant file includes it once.
//
// A decoding step multiplies one row per sequence by every weight matrix of the model, so its speed is the
// rate at which the weights stream from memory. Each task walks a contiguous range of weight rows in order,
// one row at a time, and multiplies that row with every row of x while it is in registers: one sequential
// stream per thread, which the hardware prefetcher follows best (bench/RESULTS.md, "Where the kernels'
// constants come from"). bfloat16 weights are widened to float as they are loaded, or multiplied as bfloat16
// pairs (products/linear_products.h).

#ifndef ATTN_KERNEL_NAMESPACE
#error "define ATTN_KERNEL_NAMESPACE and ATTN_KERNEL_VARIANT before including linear/linear_rows_kernel.h"
#endif

#include "ops/cpu/isa/variants.h"
#include "ops/cpu/linear/linear_rows_args.h"
#include "ops/cpu/products/linear_products.h"

#include <ATen/Parallel.h>
#include <c10/util/Exception.h>

#include <algorithm>

namespace attn::ops::cpu::ATTN_KERNEL_NAMESPACE {
namespace {

/// Weight elements per task at least, so that a small matrix is not split into tasks that cost more to start
/// than to run.
constexpr int64_t kLinearRowsTaskElements = int64_t{1} << 15;

template <int R, typename W>
void linear_rows_range(const LinearRowsArgs<W>& a, int64_t begin, int64_t end) {
  float s[R];
  for (int64_t o = begin; o < end; ++o) {
    weight_row_dots<R>(a.x, a.x_native, a.in, a.weight + o * a.weight_stride, a.pairs, s);
    const float b = a.bias ? a.bias[o] : 0.0f;
    for (int r = 0; r < R; ++r) a.y[r * a.out + o] = s[r] + b;
  }
}

template <typename W>
void linear_rows_impl(const LinearRowsArgs<W>& a) {
  const int64_t grain = std::max<int64_t>(1, kLinearRowsTaskElements / std::max<int64_t>(a.in, 1));
  at::parallel_for(0, a.out, grain, [&](int64_t begin, int64_t end) {
    switch (a.rows) {
      case 1: return linear_rows_range<1>(a, begin, end);
      case 2: return linear_rows_range<2>(a, begin, end);
      case 3: return linear_rows_range<3>(a, begin, end);
      case 4: return linear_rows_range<4>(a, begin, end);
      default: TORCH_INTERNAL_ASSERT(false, "linear_rows: ", a.rows, " rows");
    }
  });
}

}  // namespace
}  // namespace attn::ops::cpu::ATTN_KERNEL_NAMESPACE

namespace attn::ops::cpu {
void ATTN_KERNEL_VARIANT::linear_rows(const LinearRowsArgs<float>& args) {
  ATTN_KERNEL_NAMESPACE::linear_rows_impl(args);
}
void ATTN_KERNEL_VARIANT::linear_rows(const LinearRowsArgs<c10::BFloat16>& args) {
  ATTN_KERNEL_NAMESPACE::linear_rows_impl(args);
}
}  // namespace attn::ops::cpu
