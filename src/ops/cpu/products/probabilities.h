#pragma once
// How the BLAS and float-tile routes keep the forward softmax's probabilities for P·V: in the score tile
// itself, in the compute type. (The pairs route rounds them into a bfloat16 buffer of its own instead:
// products/pair_products.h.)

#include "ops/cpu/math/rows.h"

#include <algorithm>
#include <cstdint>

namespace attn::ops::cpu::ATTN_KERNEL_NAMESPACE {

template <typename T>
struct ProbabilitiesInTile {
  /// row = P = exp(row - max), in place; returns the row's sum.
  template <typename Scratch>
  T exp_sum(Scratch&, int64_t /*r*/, T* row, int64_t cols, T max, bool /*values_finite*/) const {
    return exp_shifted_sum(row, cols, max);
  }
  /// P = 0 for a row that no key of the tiles so far may reach.
  template <typename Scratch>
  void no_keys_yet(Scratch&, int64_t /*r*/, T* row, int64_t cols) const {
    std::fill(row, row + cols, T(0));
  }
};

}  // namespace attn::ops::cpu::ATTN_KERNEL_NAMESPACE
