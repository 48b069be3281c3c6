#pragma once
// What the fused kernels do to a tile of scaled scores between S = scale·Q·Kᵀ and the softmax, in the order
// backends/masks.h states: the score terms (soft-capping, then ALiBi), then the masks and the band. Compiled
// once per instruction set.

#include "ops/cpu/flash/plan.h"
#include "ops/cpu/math/rows.h"
#include "ops/cpu/math/score_terms.h"

#include <algorithm>
#include <cstdint>

namespace attn::ops::cpu::ATTN_KERNEL_NAMESPACE {

/// Soft-capping and ALiBi on a [rows, cols] tile of scaled scores at local (i0, j0); the tanh values go to
/// `tanh_out` (same layout) when given.
template <typename T, typename In>
void score_terms(const FlashProblem<T, In>& p, const Sequence& sq, int64_t h, int64_t i0, int64_t rows, int64_t j0,
                 int64_t cols, T* s, int64_t lds, T* tanh_out) {
  if (p.softcap > T(0)) {
    for (int64_t r = 0; r < rows; ++r) {
      softcap_row(s + r * lds, cols, p.softcap, tanh_out ? tanh_out + r * lds : nullptr);
    }
  }
  if (p.alibi) {
    const T slope = p.alibi[sq.id * p.alibi_stride + h];
    for (int64_t r = 0; r < rows; ++r) alibi_row(s + r * lds, cols, slope, i0 + r + sq.offset - j0);
  }
}

/// Applies the masks to a [rows, cols] tile of scores at local (i0, j0): adds the additive mask, then sets
/// every blocked pair to -inf (replacing, not adding, so that a NaN score at a blocked pair disappears).
template <typename T, typename In>
void mask_tile(const FlashProblem<T, In>& p, const Sequence& sq, int64_t h, int64_t i0, int64_t rows, int64_t j0,
               int64_t cols, T* s, int64_t lds) {
  const int64_t b = sq.b, gi = sq.q0 + i0, gj = sq.k0 + j0;  // the masks are indexed by the batch row's rows
  if (p.additive.data) {
    for (int64_t r = 0; r < rows; ++r) {
      const T* add = p.additive.row(b, h, gi + r) + gj * p.additive.sj;
      T* row = s + r * lds;
      for (int64_t c = 0; c < cols; ++c) {
        const T a = add[c * p.additive.sj];
        row[c] = a == kNegInf<T> ? kNegInf<T> : row[c] + a;
      }
    }
  }
  if (p.key_padding.data) {
    const bool* pad = p.key_padding.row(b, h, 0) + gj * p.key_padding.sj;
    for (int64_t c = 0; c < cols; ++c) {
      if (!pad[c * p.key_padding.sj]) continue;
      for (int64_t r = 0; r < rows; ++r) s[r * lds + c] = kNegInf<T>;
    }
  }
  if (p.attend.data) {
    for (int64_t r = 0; r < rows; ++r) {
      const bool* allowed = p.attend.row(b, h, gi + r) + gj * p.attend.sj;
      T* row = s + r * lds;
      for (int64_t c = 0; c < cols; ++c) {
        if (!allowed[c * p.attend.sj]) row[c] = kNegInf<T>;
      }
    }
  }
  if (tile_leaves_band(p, sq, i0, rows, j0, cols)) {
    const int64_t right = p.right_bound();
    for (int64_t r = 0; r < rows; ++r) {
      T* row = s + r * lds;
      const int64_t diagonal = i0 + r + sq.offset - j0;  // the row's diagonal, in tile columns
      if (p.window_left >= 0) {
        const int64_t first_allowed = std::clamp<int64_t>(diagonal - p.window_left, 0, cols);
        std::fill(row, row + first_allowed, kNegInf<T>);
      }
      if (right >= 0) {
        const int64_t first_blocked = std::clamp<int64_t>(diagonal + right + 1, 0, cols);
        std::fill(row + first_blocked, row + cols, kNegInf<T>);
      }
    }
  }
}

}  // namespace attn::ops::cpu::ATTN_KERNEL_NAMESPACE
