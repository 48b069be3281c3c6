#pragma once
// What the few-row linear kernel (linear/linear_rows_kernel.h) reads and writes, validated by the op (linear_rows_cpu.cpp).
#include <cstdint>
#include <vector>

namespace attn::ops::cpu {

/// One weight of a linear_rows call and where its product goes: y[r, o] = Σ_i x[r, i] · weight[o, i] + bias[o].
template <typename W>
struct LinearRowsWeight {
  const W* weight = nullptr;    // row o at weight + o * weight_stride, its in elements contiguous
  int64_t weight_stride = 0;
  int64_t out = 0;
  const float* bias = nullptr;  // [out]; nullptr: none
  W* y = nullptr;               // [rows, out] contiguous, each sum rounded to W once
};

/// The few-row linear kernel (attn::linear_rows, attn::linear_rows_many): x times each of `weights` for
/// rows <= kLinearRowsMax (<attn/ops/linear_rows.h>), summed in float. W, the weights' element type, is float
/// or bfloat16. The weights' rows are one range that the threads split, so several small weights take one
/// pass (and one wait at its end) instead of one each.
template <typename W>
struct LinearRowsArgs {
  int64_t rows = 0, in = 0;
  const float* x = nullptr;     // [rows, in] contiguous
  const W* x_native = nullptr;  // the same rows in W, contiguous (the bfloat16 pairs route reads these)
  std::vector<LinearRowsWeight<W>> weights;
  bool pairs = false;           // bfloat16 weights multiplied as pairs (products/route.h, linear_rows_take_pairs)
  bool amx = false;             // bfloat16 weights multiplied on AMX's tiles (products/route.h, linear_rows_take_amx)
  bool prefetch = true;         // the weights prefetched ahead (products/route.h, linear_rows_prefetch_weights)
};

}  // namespace attn::ops::cpu
