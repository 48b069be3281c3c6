#pragma once
// What every kernel of attn::linear_rows and attn::linear_rows_many agrees on: the checks of their arguments and
// their results' shapes. The CPU kernels and the Meta kernels (ops/meta/, which torch.compile and torch.export
// trace with) both use it.

#include <ATen/core/List.h>
#include <ATen/core/Tensor.h>
#include <c10/core/SymInt.h>

#include <vector>

namespace attn::ops {

inline constexpr const char* kLinearRowsOp = "attn::linear_rows";
inline constexpr const char* kLinearRowsManyOp = "attn::linear_rows_many";

/// Checks input [..., in] (float32 or bfloat16, at most kLinearRowsMax rows: the leading dimensions' product),
/// weight [out, in] and bias [out] or undefined, all of input's dtype, on the CPU or the meta device. Returns the
/// output's shape, [..., out], over symbolic sizes.
std::vector<c10::SymInt> check_linear_rows_args(const at::Tensor& input, const at::Tensor& weight,
                                                const at::Tensor& bias);

/// The same checks for input and each weights[k] with biases[k] (biases empty: none; an entry None: none for
/// that weight), at least one weight. Returns each output's shape, [..., out_k].
std::vector<std::vector<c10::SymInt>> check_linear_rows_many_args(const at::Tensor& input, at::TensorList weights,
                                                                  const c10::List<c10::optional<at::Tensor>>& biases);

/// biases[k] as a tensor, undefined where biases is empty or holds None there.
at::Tensor bias_at(const c10::List<c10::optional<at::Tensor>>& biases, size_t k);

}  // namespace attn::ops
