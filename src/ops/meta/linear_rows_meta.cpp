// The Meta kernel of the attn::linear_rows op: the CPU kernel's checks over symbolic sizes and its result's
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

}  // namespace

TORCH_LIBRARY_IMPL(attn, Meta, m) { m.impl("linear_rows", TORCH_FN(linear_rows_meta)); }

}  // namespace attn::ops::meta
