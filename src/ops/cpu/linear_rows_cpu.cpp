// The CPU implementation of the attn::linear_rows op: checks the arguments and calls the few-row linear
// kernel of this CPU's instruction set on the weight in place.

#include "ops/linear_rows_contract.h"
#include "ops/cpu/kernels.h"
#include "ops/cpu/products/route.h"

#include <attn/ops/linear_rows.h>

#include <ATen/ATen.h>
#include <c10/util/accumulate.h>
#include <torch/library.h>

#include <vector>

namespace attn::ops::cpu {
namespace {

at::Tensor linear_rows_cpu(const at::Tensor& input, const at::Tensor& weight, const c10::optional<at::Tensor>& bias) {
  const at::Tensor b = bias && bias->defined() ? *bias : at::Tensor();
  std::vector<int64_t> sizes;  // [..., out]
  for (const c10::SymInt& size : check_linear_rows_args(input, weight, b)) {
    sizes.push_back(size.guard_int(__FILE__, __LINE__));
  }
  const int64_t out = weight.size(0), in = weight.size(1);
  const int64_t count = c10::multiply_integers(sizes.begin(), sizes.end() - 1);
  if (count == 0 || out == 0) return at::empty(sizes, input.options());
  // No products to sum (and the weight may hold no storage to point into).
  if (in == 0) return b.defined() ? b.expand(sizes).contiguous() : at::zeros(sizes, input.options());

  const at::Tensor x_native = input.reshape({count, in}).contiguous();
  const at::Tensor w = weight.stride(1) == 1 ? weight : weight.contiguous();
  const at::Tensor b_native = b.defined() ? b.contiguous() : at::Tensor();
  // The kernel writes y in its own dtype, each sum rounded once. A decoding step's bfloat16 x and bias are a
  // few thousand elements, widened here in plain loops: the step's ~200 products skip the tensor operations
  // that converting x, y and the bias took (bench/RESULTS.md).
  at::Tensor y = at::empty({count, out}, input.options());
  const auto fill = [&](auto& args) {
    args.rows = count, args.in = in, args.out = out;
    args.weight_stride = w.stride(0);
  };
  if (input.scalar_type() == at::kBFloat16) {
    const c10::BFloat16* native = x_native.data_ptr<c10::BFloat16>();
    const std::vector<float> x(native, native + count * in);
    std::vector<float> bias_float;
    if (b_native.defined()) {
      const c10::BFloat16* p = b_native.data_ptr<c10::BFloat16>();
      bias_float.assign(p, p + out);
    }
    LinearRowsArgs<c10::BFloat16> args;
    fill(args);
    args.bias = b_native.defined() ? bias_float.data() : nullptr;
    args.x = x.data();
    args.x_native = native;
    args.weight = w.data_ptr<c10::BFloat16>();
    args.y = y.data_ptr<c10::BFloat16>();
    args.pairs = linear_rows_take_pairs(weight.scalar_type());
    linear_rows(args);
    return y.view(sizes);
  }
  LinearRowsArgs<float> args;
  fill(args);
  args.bias = b_native.defined() ? b_native.data_ptr<float>() : nullptr;
  args.x = x_native.data_ptr<float>();
  args.weight = w.data_ptr<float>();
  args.y = y.data_ptr<float>();
  linear_rows(args);
  return y.view(sizes);
}

}  // namespace

TORCH_LIBRARY_IMPL(attn, CPU, m) { m.impl("linear_rows", TORCH_FN(linear_rows_cpu)); }

}  // namespace attn::ops::cpu
