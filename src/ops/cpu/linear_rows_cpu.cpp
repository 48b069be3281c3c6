// The CPU implementation of the attn::linear_rows and attn::linear_rows_many ops: checks the arguments and calls
// the few-row linear kernel of this CPU's instruction set on the weights in place.

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

std::vector<int64_t> concrete(const std::vector<c10::SymInt>& shape) {
  std::vector<int64_t> sizes;
  for (const c10::SymInt& size : shape) sizes.push_back(size.guard_int(__FILE__, __LINE__));
  return sizes;
}

/// input times each of weights[k] plus biases[k] (undefined: none), checked, into tensors of shapes[k].
std::vector<at::Tensor> multiply(const at::Tensor& input, at::TensorList weights, const std::vector<at::Tensor>& biases,
                                 const std::vector<std::vector<int64_t>>& shapes) {
  const int64_t in = input.size(-1);
  const int64_t count = c10::multiply_integers(shapes[0].begin(), shapes[0].end() - 1);
  std::vector<at::Tensor> outs;
  // What the kernel reads: each weight with rows contiguous, and each output and bias in its dtype, contiguous.
  std::vector<at::Tensor> kept;
  std::vector<size_t> taken;  // the weights the kernel multiplies
  for (size_t k = 0; k < weights.size(); ++k) {
    const int64_t out = weights[k].size(0);
    if (count == 0 || out == 0) {
      outs.push_back(at::empty(shapes[k], input.options()));
    } else if (in == 0) {  // no products to sum (and the weight may hold no storage to point into)
      outs.push_back(biases[k].defined() ? biases[k].expand(shapes[k]).contiguous()
                                         : at::zeros(shapes[k], input.options()));
    } else {
      outs.push_back(at::empty({count, out}, input.options()));
      taken.push_back(k);
    }
  }
  if (taken.empty()) return outs;

  const at::Tensor x_native = input.reshape({count, in}).contiguous();
  const auto describe = [&](auto& args, auto element) {
    using W = decltype(element);
    args.rows = count, args.in = in;
    args.prefetch = linear_rows_prefetch_weights(count);
    for (size_t k : taken) {
      const at::Tensor w = weights[k].stride(1) == 1 ? weights[k] : weights[k].contiguous();
      kept.push_back(w);
      LinearRowsWeight<W> part;
      part.weight = w.data_ptr<W>();
      part.weight_stride = w.stride(0);
      part.out = w.size(0);
      part.y = outs[k].data_ptr<W>();
      args.weights.push_back(part);
    }
  };
  if (input.scalar_type() == at::kBFloat16) {
    // The kernel writes y in its own dtype, each sum rounded once. A decoding step's bfloat16 x and biases are a
    // few thousand elements, widened here in plain loops: the step's ~200 products skip the tensor operations
    // that converting x, y and the bias took (bench/RESULTS.md).
    const c10::BFloat16* native = x_native.data_ptr<c10::BFloat16>();
    const std::vector<float> x(native, native + count * in);
    std::vector<std::vector<float>> biases_float(taken.size());
    LinearRowsArgs<c10::BFloat16> args;
    describe(args, c10::BFloat16());
    for (size_t i = 0; i < taken.size(); ++i) {
      const at::Tensor& b = biases[taken[i]];
      if (!b.defined()) continue;
      const at::Tensor b_native = b.contiguous();
      const c10::BFloat16* p = b_native.data_ptr<c10::BFloat16>();
      biases_float[i].assign(p, p + b_native.numel());
      args.weights[i].bias = biases_float[i].data();
    }
    args.x = x.data();
    args.x_native = native;
    args.pairs = linear_rows_take_pairs(input.scalar_type());
    args.amx = linear_rows_take_amx(input.scalar_type(), count);
    linear_rows(args);
  } else {
    LinearRowsArgs<float> args;
    describe(args, float());
    for (size_t i = 0; i < taken.size(); ++i) {
      const at::Tensor& b = biases[taken[i]];
      if (!b.defined()) continue;
      kept.push_back(b.contiguous());
      args.weights[i].bias = kept.back().data_ptr<float>();
    }
    args.x = x_native.data_ptr<float>();
    linear_rows(args);
  }
  for (size_t k : taken) outs[k] = outs[k].view(shapes[k]);
  return outs;
}

at::Tensor linear_rows_cpu(const at::Tensor& input, const at::Tensor& weight, const c10::optional<at::Tensor>& bias) {
  const at::Tensor b = bias && bias->defined() ? *bias : at::Tensor();
  const std::vector<int64_t> shape = concrete(check_linear_rows_args(input, weight, b));
  return multiply(input, {weight}, {b}, {shape})[0];
}

std::vector<at::Tensor> linear_rows_many_cpu(const at::Tensor& input, at::TensorList weights,
                                             const c10::List<c10::optional<at::Tensor>>& biases) {
  std::vector<std::vector<int64_t>> shapes;
  for (const std::vector<c10::SymInt>& shape : check_linear_rows_many_args(input, weights, biases)) {
    shapes.push_back(concrete(shape));
  }
  std::vector<at::Tensor> b;
  for (size_t k = 0; k < weights.size(); ++k) b.push_back(bias_at(biases, k));
  return multiply(input, weights, b, shapes);
}

}  // namespace

TORCH_LIBRARY_IMPL(attn, CPU, m) {
  m.impl("linear_rows", TORCH_FN(linear_rows_cpu));
  m.impl("linear_rows_many", TORCH_FN(linear_rows_many_cpu));
}

}  // namespace attn::ops::cpu
