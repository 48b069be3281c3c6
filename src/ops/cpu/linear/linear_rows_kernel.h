// The few-row linear kernel (attn::linear_rows), compiled once per instruction set (ops/cpu/variant_*.cpp).
// No include guard on purpose: each variant file includes it once.
//
// A decoding step multiplies one row per sequence by every weight matrix of the model, so its speed is the
// rate at which the weights stream from memory. Each task walks a contiguous range of weight rows in order,
// one row at a time, and multiplies that row with every row of x while it is in registers: one sequential
// stream per thread, which the hardware prefetcher follows best (bench/RESULTS.md, "Where the kernels'
// constants come from"). Several weights that multiply the same x (a layer's q, k and v) form one range of
// rows, so their short streams cost one pass and one wait at its end. bfloat16 weights are widened to float
// as they are loaded, or multiplied as bfloat16 pairs (products/linear_products.h), or, for several rows on a
// CPU with AMX, 16 weight rows at a time against every row of x on AMX's tiles (products/amx_linear.h).

#ifndef ATTN_KERNEL_NAMESPACE
#error "define ATTN_KERNEL_NAMESPACE and ATTN_KERNEL_VARIANT before including linear/linear_rows_kernel.h"
#endif

#include "ops/cpu/isa/variants.h"
#include "ops/cpu/linear/linear_rows_args.h"
#include "ops/cpu/products/cache_line_vector.h"
#include "ops/cpu/products/linear_products.h"

#if defined(CPU_CAPABILITY_AVX512) && defined(ATTN_HAVE_AMX)
#define ATTN_LINEAR_AMX 1
#include "ops/cpu/products/amx_linear.h"
#include "ops/cpu/products/amx_panels.h"
#endif

#include <ATen/Parallel.h>
#include <c10/util/Exception.h>

#include <attn/ops/linear_rows.h>

#include <algorithm>
#include <type_traits>
#include <vector>

namespace attn::ops::cpu::ATTN_KERNEL_NAMESPACE {
namespace {

/// Weight elements per task at least, so that a small matrix is not split into tasks that cost more to start
/// than to run.
constexpr int64_t kLinearRowsTaskElements = int64_t{1} << 15;

/// Rows of x per register tile (weight_row_dots); more rows go through the same weight row group by group,
/// while it is in L1.
constexpr int64_t kRowsPerTile = 4;

/// y[r0 .. r0 + R) of row o of weight w, with its bias.
template <int R, typename W>
void dot_group(const LinearRowsArgs<W>& a, const LinearRowsWeight<W>& w, int64_t r0, int64_t o, float bias) {
  float s[R];
  weight_row_dots<R>(a.x + r0 * a.in, a.x_native ? a.x_native + r0 * a.in : nullptr, a.in,
                     w.weight + o * w.weight_stride, a.pairs, a.prefetch, s);
  for (int r = 0; r < R; ++r) w.y[(r0 + r) * w.out + o] = static_cast<W>(s[r] + bias);
}

template <typename W>
void weight_rows_range(const LinearRowsArgs<W>& a, const LinearRowsWeight<W>& w, int64_t begin, int64_t end) {
  for (int64_t o = begin; o < end; ++o) {
    const float b = w.bias ? w.bias[o] : 0.0f;
    for (int64_t r0 = 0; r0 < a.rows; r0 += kRowsPerTile) {
      switch (std::min(kRowsPerTile, a.rows - r0)) {
        case 1: dot_group<1>(a, w, r0, o, b); break;
        case 2: dot_group<2>(a, w, r0, o, b); break;
        case 3: dot_group<3>(a, w, r0, o, b); break;
        default: dot_group<4>(a, w, r0, o, b); break;
      }
    }
  }
}

#ifdef ATTN_LINEAR_AMX
/// The AMX tiles' pass: x packed once as a column panel, and the weights' rows in groups of kAmxLinearGroup,
/// one range that the threads split; a task's consecutive groups of one weight are one call, so that each group
/// prefetches the next.
void linear_rows_on_amx(const LinearRowsArgs<c10::BFloat16>& a) {
  CacheLineVector<uint32_t> panel(amx_panel_words(a.rows, a.in));
  amx_pack_column_panels(a.x_native, a.in, a.rows, a.in, panel.data());
  std::vector<int64_t> first_group;  // of each weight, in the range of every weight's groups
  int64_t groups = 0;
  for (const LinearRowsWeight<c10::BFloat16>& w : a.weights) {
    first_group.push_back(groups);
    groups += (w.out + kAmxLinearGroup - 1) / kAmxLinearGroup;
  }
  const int64_t grain = std::max<int64_t>(1, kLinearRowsTaskElements / (kAmxLinearGroup * std::max<int64_t>(a.in, 1)));
  at::parallel_for(0, groups, grain, [&](int64_t begin, int64_t end) {
    for (size_t k = 0; k < a.weights.size(); ++k) {
      const LinearRowsWeight<c10::BFloat16>& w = a.weights[k];
      const int64_t lo = std::max(begin, first_group[k]) - first_group[k];
      const int64_t hi = std::min(end, first_group[k] + (w.out + kAmxLinearGroup - 1) / kAmxLinearGroup) - first_group[k];
      if (lo >= hi) continue;
      const int64_t o = lo * kAmxLinearGroup, outs = std::min(hi * kAmxLinearGroup, w.out) - o;
      amx_linear_rows(panel.data(), a.rows, a.in, w.weight + o * w.weight_stride, w.weight_stride, outs,
                      w.bias ? w.bias + o : nullptr, w.y + o, w.out);
    }
  });
}
#endif

template <typename W>
void linear_rows_impl(const LinearRowsArgs<W>& a) {
  TORCH_INTERNAL_ASSERT(a.rows >= 1 && a.rows <= kLinearRowsMax, "linear_rows: ", a.rows, " rows");
  if constexpr (std::is_same_v<W, c10::BFloat16>) {
    if (a.amx) {
#ifdef ATTN_LINEAR_AMX
      return linear_rows_on_amx(a);
#else
      TORCH_INTERNAL_ASSERT(false, "attn: linear_rows' AMX tiles were not compiled in this variant");
#endif
    }
  }
  int64_t total = 0;
  for (const LinearRowsWeight<W>& w : a.weights) total += w.out;
  const int64_t grain = std::max<int64_t>(1, kLinearRowsTaskElements / std::max<int64_t>(a.in, 1));
  // The weights' rows one after another: a task's range may run from the end of one weight into the next.
  at::parallel_for(0, total, grain, [&](int64_t begin, int64_t end) {
    int64_t first = 0;
    for (const LinearRowsWeight<W>& w : a.weights) {
      const int64_t lo = std::max(begin, first), hi = std::min(end, first + w.out);
      if (lo < hi) weight_rows_range(a, w, lo - first, hi - first);
      first += w.out;
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
