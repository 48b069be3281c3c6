// The Meta kernels of the attn::linear_rows and attn::linear_rows_many ops: the CPU kernel's checks over symbolic sizes and its result's
// shape and dtype (contiguous, as the CPU kernel returns it).

#include "ops/linear_rows_contract.h"

#include <ATen/ATen.h>
#include <torch/library.h>

namespace attn::ops::meta {
namespace {

at::Tensor linear_rows_meta(const at::Tensor& input, const at::Tensor& weight, const c10::optional<at::Tensor>& bias) {
  return at::empty_symint(check_linear_rows_args(input, weight, bias && bias->defined() ? *bias : at::Tensor()),
                          input.options());
}

std::vector<at::Tensor> linear_rows_many_meta(const at::Tensor& input, at::TensorList weights,
                                              const c10::List<c10::optional<at::Tensor>>& biases) {
  std::vector<at::Tensor> outs;
  for (const std::vector<c10::SymInt>& shape : check_linear_rows_many_args(input, weights, biases)) {
    outs.push_back(at::empty_symint(shape, input.options()));
  }
  return outs;
}

}  // namespace

TORCH_LIBRARY_IMPL(attn, Meta, m) {
  m.impl("linear_rows", TORCH_FN(linear_rows_meta));
  m.impl("linear_rows_many", TORCH_FN(linear_rows_many_meta));
}

}  // namespace attn::ops::meta
