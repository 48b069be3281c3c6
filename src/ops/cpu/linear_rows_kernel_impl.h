// The few-row linear kernel (attn::linear_rows), written once and compiled once per instruction set as part
// of the variant files (flash_attention_kernel_{default,avx2,avx512}.cpp). No include guard on purpose.
//
// A decoding step multiplies one row per sequence by every weight matrix of the model, so its speed is the
// rate at which the weights stream from memory. Each task walks a contiguous range of weight rows in order,
// one row at a time, and multiplies that row with every row of x while it is in registers: one sequential
// stream per thread, which the hardware prefetcher follows best. On an AMD Zen 4 with 2 threads, a
// 49152 x 576 float32 matrix streamed at 37-40 GB/s this way, 27 GB/s four rows at a time, and 10 GB/s
// through the PyTorch wheel's matrix-vector product (MKL). bfloat16 weights are widened to float as they are
// loaded; where the CPU has AVX512-BF16, linear_rows_pairs multiplies them as bfloat16 pairs instead
// (bf16_dot_rows), one instruction per 32 weights and row.

#ifndef ATTN_KERNEL_NAMESPACE
#error "define ATTN_KERNEL_NAMESPACE before including linear_rows_kernel_impl.h"
#endif

#if defined(CPU_CAPABILITY_AVX512) && defined(ATTN_HAVE_BF16_DOT)
#define ATTN_LINEAR_ROWS_PAIRS 1
#include "ops/cpu/bf16_gemm.h"
#endif
#include "ops/cpu/flash_attention_kernel.h"
#include "ops/cpu/register_tiles.h"

#include <attn/ops/linear_rows.h>

#include <ATen/Parallel.h>

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
    score_tile<R, 1, float, W>(a.x, a.weight + o * a.weight_stride, a.weight_stride, a.in, 1.0f, s, 1);
    const float b = a.bias ? a.bias[o] : 0.0f;
    for (int r = 0; r < R; ++r) a.y[r * a.out + o] = s[r] + b;
  }
}

int64_t linear_rows_grain(int64_t in) {
  return std::max<int64_t>(1, kLinearRowsTaskElements / std::max<int64_t>(in, 1));
}

template <typename W>
void linear_rows_impl(const LinearRowsArgs<W>& a) {
  at::parallel_for(0, a.out, linear_rows_grain(a.in), [&](int64_t begin, int64_t end) {
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

void linear_rows(const LinearRowsArgs<float>& args) { linear_rows_impl(args); }
void linear_rows(const LinearRowsArgs<c10::BFloat16>& args) { linear_rows_impl(args); }

#ifdef ATTN_LINEAR_ROWS_PAIRS
void linear_rows_pairs(const LinearRowsArgs<c10::BFloat16>& a) {
  at::parallel_for(0, a.out, linear_rows_grain(a.in), [&](int64_t begin, int64_t end) {
    float s[kLinearRowsMax];
    for (int64_t o = begin; o < end; ++o) {
      bf16_dot_rows(static_cast<int>(a.rows), a.x_native, a.in, a.weight + o * a.weight_stride, s);
      const float b = a.bias ? a.bias[o] : 0.0f;
      for (int64_t r = 0; r < a.rows; ++r) a.y[r * a.out + o] = s[r] + b;
    }
  });
}
#undef ATTN_LINEAR_ROWS_PAIRS
#endif

}  // namespace attn::ops::cpu::ATTN_KERNEL_NAMESPACE
