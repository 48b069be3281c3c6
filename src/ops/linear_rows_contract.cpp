#include "ops/linear_rows_contract.h"

#include "common/dtypes.h"

#include <attn/ops/linear_rows.h>

#include <ATen/ATen.h>

namespace attn::ops {
namespace {

void check_dtype_device(const char* arg, const at::Tensor& t, const at::Tensor& input) {
  TORCH_CHECK(t.device().is_cpu() || t.device().is_meta(), kLinearRowsOp, ": ", arg, " must be on the CPU, got ",
              t.device());
  TORCH_CHECK(t.scalar_type() == input.scalar_type(), kLinearRowsOp, ": ", arg, " must have input's dtype ",
              common::dtype_name(input), ", got ", common::dtype_name(t));
}

}  // namespace

std::vector<c10::SymInt> check_linear_rows_args(const at::Tensor& input, const at::Tensor& weight,
                                                const at::Tensor& bias) {
  TORCH_CHECK(input.defined() && weight.defined(), kLinearRowsOp, ": input and weight must be defined tensors");
  TORCH_CHECK(input.scalar_type() == at::kFloat || input.scalar_type() == at::kBFloat16, kLinearRowsOp,
              ": input must be float32 or bfloat16, got ", common::dtype_name(input));
  check_dtype_device("input", input, input);
  check_dtype_device("weight", weight, input);
  TORCH_CHECK(weight.dim() == 2, kLinearRowsOp, ": weight must be [out_features, in_features], got ",
              weight.sym_sizes());
  const c10::SymInt out = weight.sym_size(0), in = weight.sym_size(1);
  TORCH_CHECK(input.dim() >= 1 && input.sym_size(-1) == in, kLinearRowsOp,
              ": input must be [..., in_features] = [..., ", in, "] to match weight ", weight.sym_sizes(), ", got ",
              input.sym_sizes());
  std::vector<c10::SymInt> sizes = input.sym_sizes().vec();
  sizes.back() = out;
  c10::SymInt rows = 1;
  for (size_t i = 0; i + 1 < sizes.size(); ++i) rows = rows * sizes[i];
  TORCH_CHECK(rows <= kLinearRowsMax, kLinearRowsOp, ": input must hold at most ", kLinearRowsMax,
              " rows (the leading dimensions' product), got ", rows, " in ", input.sym_sizes(),
              "; at::linear multiplies more");
  if (bias.defined()) {
    check_dtype_device("bias", bias, input);
    TORCH_CHECK(bias.dim() == 1 && bias.sym_size(0) == out, kLinearRowsOp, ": bias must be [out_features] = [", out,
                "], got ", bias.sym_sizes());
  }
  return sizes;
}

}  // namespace attn::ops
