// The CPU implementation of the attn::linear_rows op: checks the arguments and calls the few-row linear
// kernel of this CPU's instruction set on the weight in place.

#include "common/checks.h"
#include "ops/cpu/kernels.h"
#include "ops/cpu/products/route.h"

#include <attn/ops/linear_rows.h>

#include <ATen/ATen.h>
#include <c10/util/accumulate.h>
#include <torch/library.h>

#include <vector>

namespace attn::ops::cpu {
namespace {

constexpr const char* kLinearRowsOp = "attn::linear_rows";

void check_dtype_device(const char* arg, const at::Tensor& t, const at::Tensor& input) {
  TORCH_CHECK(t.device().is_cpu(), kLinearRowsOp, ": ", arg, " must be on the CPU, got ", t.device());
  TORCH_CHECK(t.scalar_type() == input.scalar_type(), kLinearRowsOp, ": ", arg, " must have input's dtype ",
              common::dtype_name(input), ", got ", common::dtype_name(t));
}

at::Tensor linear_rows_cpu(const at::Tensor& input, const at::Tensor& weight, const c10::optional<at::Tensor>& bias) {
  TORCH_CHECK(input.defined() && weight.defined(), kLinearRowsOp, ": input and weight must be defined tensors");
  TORCH_CHECK(input.scalar_type() == at::kFloat || input.scalar_type() == at::kBFloat16, kLinearRowsOp,
              ": input must be float32 or bfloat16, got ", common::dtype_name(input));
  check_dtype_device("input", input, input);
  check_dtype_device("weight", weight, input);
  TORCH_CHECK(weight.dim() == 2, kLinearRowsOp, ": weight must be [out_features, in_features], got ", weight.sizes());
  const int64_t out = weight.size(0), in = weight.size(1);
  TORCH_CHECK(input.dim() >= 1 && input.size(-1) == in, kLinearRowsOp,
              ": input must be [..., in_features] = [..., ", in, "] to match weight ", weight.sizes(), ", got ",
              input.sizes());
  std::vector<int64_t> sizes = input.sizes().vec();
  sizes.back() = out;
  const int64_t count = c10::multiply_integers(sizes.begin(), sizes.end() - 1);
  TORCH_CHECK(count <= kLinearRowsMax, kLinearRowsOp, ": input must hold at most ", kLinearRowsMax,
              " rows (the leading dimensions' product), got ", count, " in ", input.sizes(),
              "; at::linear multiplies more");
  at::Tensor b;
  if (bias && bias->defined()) {
    b = *bias;
    check_dtype_device("bias", b, input);
    TORCH_CHECK(b.dim() == 1 && b.size(0) == out, kLinearRowsOp, ": bias must be [out_features] = [", out, "], got ",
                b.sizes());
  }
  if (count == 0 || out == 0) return at::empty(sizes, input.options());
  // No products to sum (and the weight may hold no storage to point into).
  if (in == 0) return b.defined() ? b.expand(sizes).contiguous() : at::zeros(sizes, input.options());

  const at::Tensor x_native = input.reshape({count, in}).contiguous();
  const at::Tensor x = x_native.to(at::kFloat);
  const at::Tensor w = weight.stride(1) == 1 ? weight : weight.contiguous();
  const at::Tensor bias_float = b.defined() ? b.to(at::kFloat).contiguous() : at::Tensor();
  at::Tensor y = at::empty({count, out}, input.options().dtype(at::kFloat));
  const auto fill = [&](auto& args) {
    args.rows = count, args.in = in, args.out = out;
    args.x = x.data_ptr<float>();
    args.weight_stride = w.stride(0);
    args.bias = bias_float.defined() ? bias_float.data_ptr<float>() : nullptr;
    args.y = y.data_ptr<float>();
  };
  if (input.scalar_type() == at::kBFloat16) {
    LinearRowsArgs<c10::BFloat16> args;
    fill(args);
    args.weight = w.data_ptr<c10::BFloat16>();
    args.x_native = x_native.data_ptr<c10::BFloat16>();
    args.pairs = linear_rows_take_pairs(weight.scalar_type());
    linear_rows(args);
    return y.to(at::kBFloat16).view(sizes);
  }
  LinearRowsArgs<float> args;
  fill(args);
  args.weight = w.data_ptr<float>();
  linear_rows(args);
  return y.view(sizes);
}

}  // namespace

TORCH_LIBRARY_IMPL(attn, CPU, m) { m.impl("linear_rows", TORCH_FN(linear_rows_cpu)); }

}  // namespace attn::ops::cpu
