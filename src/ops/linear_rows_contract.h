#pragma once
// What every kernel of attn::linear_rows agrees on: the checks of its arguments and its result's shape. The CPU
// kernel and the Meta kernel (ops/meta/, which torch.compile and torch.export trace with) both use it.

#include <ATen/core/Tensor.h>
#include <c10/core/SymInt.h>

#include <vector>

namespace attn::ops {

inline constexpr const char* kLinearRowsOp = "attn::linear_rows";

/// Checks input [..., in] (float32 or bfloat16, at most kLinearRowsMax rows: the leading dimensions' product),
/// weight [out, in] and bias [out] or undefined, all of input's dtype, on the CPU or the meta device. Returns the
/// output's shape, [..., out], over symbolic sizes.
std::vector<c10::SymInt> check_linear_rows_args(const at::Tensor& input, const at::Tensor& weight,
                                                const at::Tensor& bias);

}  // namespace attn::ops
