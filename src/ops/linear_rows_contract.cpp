#include "ops/linear_rows_contract.h"

#include "common/checks.h"
#include "common/dtypes.h"

#include <attn/ops/linear_rows.h>

#include <ATen/ATen.h>

#include <string>

namespace attn::ops {
namespace {

/// The names a message gives the op and the weight and bias it checks.
struct Names {
  const char* op;
  std::string weight, bias;
};

void check_dtype_device(const Names& n, const std::string& arg, const at::Tensor& t, const at::Tensor& input) {
  TORCH_CHECK(t.device().is_cpu() || t.device().is_meta(), n.op, ": ", arg, " must be on the CPU, got ", t.device());
  // A meta tensor beside a real one would send the call to the Meta kernel: an uninitialised result, no error.
  common::check_same_device(n.op, arg.c_str(), t, "input", input);
  TORCH_CHECK(t.scalar_type() == input.scalar_type(), n.op, ": ", arg, " must have input's dtype ",
              common::dtype_name(input), ", got ", common::dtype_name(t));
}

void check_input(const char* op, const at::Tensor& input) {
  TORCH_CHECK(input.scalar_type() == at::kFloat || input.scalar_type() == at::kBFloat16, op,
              ": input must be float32 or bfloat16, got ", common::dtype_name(input));
  check_dtype_device({op, "", ""}, "input", input, input);
}

std::vector<c10::SymInt> check_weight(const Names& n, const at::Tensor& input, const at::Tensor& weight,
                                      const at::Tensor& bias) {
  check_dtype_device(n, n.weight, weight, input);
  TORCH_CHECK(weight.dim() == 2, n.op, ": ", n.weight, " must be [out_features, in_features], got ",
              weight.sym_sizes());
  const c10::SymInt out = weight.sym_size(0), in = weight.sym_size(1);
  TORCH_CHECK(input.dim() >= 1 && input.sym_size(-1) == in, n.op, ": input must be [..., in_features] = [..., ", in,
              "] to match ", n.weight, " ", weight.sym_sizes(), ", got ", input.sym_sizes());
  std::vector<c10::SymInt> sizes = input.sym_sizes().vec();
  sizes.back() = out;
  c10::SymInt rows = 1;
  for (size_t i = 0; i + 1 < sizes.size(); ++i) rows = rows * sizes[i];
  TORCH_CHECK(rows <= kLinearRowsMax, n.op, ": input must hold at most ", kLinearRowsMax,
              " rows (the leading dimensions' product), got ", rows, " in ", input.sym_sizes(),
              "; at::linear multiplies more");
  if (bias.defined()) {
    check_dtype_device(n, n.bias, bias, input);
    TORCH_CHECK(bias.dim() == 1 && bias.sym_size(0) == out, n.op, ": ", n.bias, " must be [out_features] = [", out,
                "], got ", bias.sym_sizes());
  }
  return sizes;
}

}  // namespace

std::vector<c10::SymInt> check_linear_rows_args(const at::Tensor& input, const at::Tensor& weight,
                                                const at::Tensor& bias) {
  TORCH_CHECK(input.defined() && weight.defined(), kLinearRowsOp, ": input and weight must be defined tensors");
  check_input(kLinearRowsOp, input);
  return check_weight({kLinearRowsOp, "weight", "bias"}, input, weight, bias);
}

at::Tensor bias_at(const c10::List<c10::optional<at::Tensor>>& biases, size_t k) {
  if (biases.empty()) return at::Tensor();
  const c10::optional<at::Tensor> b = biases.get(k);
  return b && b->defined() ? *b : at::Tensor();
}

std::vector<std::vector<c10::SymInt>> check_linear_rows_many_args(const at::Tensor& input, at::TensorList weights,
                                                                  const c10::List<c10::optional<at::Tensor>>& biases) {
  const char* op = kLinearRowsManyOp;
  TORCH_CHECK(input.defined(), op, ": input must be a defined tensor");
  TORCH_CHECK(!weights.empty(), op, ": weights must hold at least one weight");
  TORCH_CHECK(biases.empty() || biases.size() == weights.size(), op, ": biases must be empty or hold one entry (a ",
              "tensor or None) per weight: ", weights.size(), ", got ", biases.size());
  check_input(op, input);
  std::vector<std::vector<c10::SymInt>> shapes;
  for (size_t k = 0; k < weights.size(); ++k) {
    const std::string index = c10::str("[", k, "]");
    TORCH_CHECK(weights[k].defined(), op, ": weights", index, " must be a defined tensor");
    shapes.push_back(check_weight({op, "weights" + index, "biases" + index}, input, weights[k], bias_at(biases, k)));
  }
  return shapes;
}

}  // namespace attn::ops
