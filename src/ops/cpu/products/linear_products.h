#pragma once
// linear_rows' products: the dot products of R rows of x with one weight row, on its two routes. Widened to
// float in register tiles (products/row_tiles.h), or, for bfloat16 weights where products/route.h chose the
// pairs (LinearRowsArgs::pairs), as bfloat16 pairs summed in float (bf16_dot_rows: one load and one vdpbf16ps
// per 32 weights and row, where widening takes four instructions). The only place that knows whether this
// instruction-set variant compiled the pairs.

#include "ops/cpu/products/row_tiles.h"

#if defined(CPU_CAPABILITY_AVX512) && defined(ATTN_HAVE_BF16_DOT)
#define ATTN_LINEAR_PAIR_PRODUCTS 1
#include "ops/cpu/products/bf16_pairs.h"
#endif

#include <c10/util/BFloat16.h>
#include <c10/util/Exception.h>

#include <cstdint>
#include <type_traits>

namespace attn::ops::cpu::ATTN_KERNEL_NAMESPACE {

/// s[r] = Σ_i x[r, i] · w[i] for r < R, over `in` elements: x's rows contiguous, as float (x) and in W
/// (x_native, which the pairs read); with `pairs`, as bfloat16 pairs.
template <int R, typename W>
void weight_row_dots(const float* x, const W* x_native, int64_t in, const W* w, bool pairs, float* s) {
  if constexpr (std::is_same_v<W, c10::BFloat16>) {
    if (pairs) {
#ifdef ATTN_LINEAR_PAIR_PRODUCTS
      return bf16_dot_rows(R, x_native, in, w, s);
#else
      TORCH_INTERNAL_ASSERT(false, "attn: linear_rows' bfloat16 pairs were not compiled in this variant");
#endif
    }
  }
  (void)x_native, (void)pairs;
  score_tile<R, 1>(x, StridedRows<W>{w, in}, in, 1.0f, s, 1);
}

}  // namespace attn::ops::cpu::ATTN_KERNEL_NAMESPACE
