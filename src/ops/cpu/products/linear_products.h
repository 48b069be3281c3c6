#pragma once
// linear_rows' products: the dot products of R rows of x with one weight row, on its two routes. Widened to
// float as they are loaded (widened_dot_rows, on products/row_tiles.h's loads), or, for bfloat16 weights where
// products/route.h chose the pairs (LinearRowsArgs::pairs), as bfloat16 pairs summed in float (bf16_dot_rows:
// one load and one vdpbf16ps per 32 weights and row, where widening takes four instructions). The only place
// that knows whether this instruction-set variant compiled the pairs.

#include "ops/cpu/products/row_tiles.h"
#include "ops/cpu/products/weight_prefetch.h"

#if defined(CPU_CAPABILITY_AVX512) && defined(ATTN_HAVE_BF16_DOT)
#define ATTN_LINEAR_PAIR_PRODUCTS 1
#include "ops/cpu/products/bf16_pairs.h"
#endif

#include <c10/util/BFloat16.h>
#include <c10/util/Exception.h>

#include <cstdint>
#include <functional>
#include <type_traits>

namespace attn::ops::cpu::ATTN_KERNEL_NAMESPACE {

/// s[r] = Σ_i x[r, i] · w[i] for r < R, with w widened to float as it is loaded. The weights stream once, in
/// order, prefetched ahead where Prefetch (products/weight_prefetch.h). Two accumulators per row, so that one
/// row's sum is not a single chain of dependent FMAs.
template <int R, bool Prefetch, typename W>
void widened_dot_rows(const float* x, int64_t in, const W* w, float* s) {
  using Vec = Vectorized<float>;
  constexpr int64_t kStep = 2 * Vec::size();  // weights per iteration
  Vec acc0[R], acc1[R];
  for (int r = 0; r < R; ++r) acc0[r] = acc1[r] = Vec(0.0f);
  int64_t i = 0;
  for (; i + kStep <= in; i += kStep) {
    if constexpr (Prefetch) prefetch_weights_ahead(w + i, kStep * static_cast<int64_t>(sizeof(W)));
    Vec w0, w1;
    load_two<float>(w + i, w0, w1);
    for (int r = 0; r < R; ++r) {
      acc0[r] = at::vec::fmadd(Vec::loadu(x + r * in + i), w0, acc0[r]);
      acc1[r] = at::vec::fmadd(Vec::loadu(x + r * in + i + Vec::size()), w1, acc1[r]);
    }
  }
  for (; i + Vec::size() <= in; i += Vec::size()) {
    const Vec w0 = load_one<float>(w + i);
    for (int r = 0; r < R; ++r) acc0[r] = at::vec::fmadd(Vec::loadu(x + r * in + i), w0, acc0[r]);
  }
  for (int r = 0; r < R; ++r) acc0[r] = acc0[r] + acc1[r];
  int r = 0;
  for (; r + 4 <= R; r += 4) sum_lanes4(acc0 + r, s + r);
  for (; r < R; ++r) s[r] = at::vec::vec_reduce_all<float>(std::plus<Vec>(), acc0[r]);
  for (; i < in; ++i) {
    for (int q = 0; q < R; ++q) s[q] += x[q * in + i] * static_cast<float>(w[i]);
  }
}

/// s[r] = Σ_i x[r, i] · w[i] for r < R, over `in` elements: x's rows contiguous, as float (x) and in W
/// (x_native, which the pairs read); with `pairs`, as bfloat16 pairs; with `prefetch`, the weights prefetched.
template <int R, typename W>
void weight_row_dots(const float* x, const W* x_native, int64_t in, const W* w, bool pairs, bool prefetch,
                     float* s) {
  if constexpr (std::is_same_v<W, c10::BFloat16>) {
    if (pairs) {
#ifdef ATTN_LINEAR_PAIR_PRODUCTS
      return bf16_dot_rows(R, x_native, in, w, prefetch, s);
#else
      TORCH_INTERNAL_ASSERT(false, "attn: linear_rows' bfloat16 pairs were not compiled in this variant");
#endif
    }
  }
  (void)x_native, (void)pairs;
  prefetch ? widened_dot_rows<R, true>(x, in, w, s) : widened_dot_rows<R, false>(x, in, w, s);
}

}  // namespace attn::ops::cpu::ATTN_KERNEL_NAMESPACE
