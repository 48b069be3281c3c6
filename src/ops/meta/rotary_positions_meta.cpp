// The Meta kernel of the attn::rotary_positions op: the CPU kernel's checks over symbolic sizes, and its
// result: x's shape and dtype, contiguous.

#include "ops/rotary_positions_contract.h"

#include <ATen/ATen.h>
#include <torch/library.h>

namespace attn::ops::meta {
namespace {

at::Tensor rotary_positions_meta(const at::Tensor& x, const at::Tensor& positions, const at::Tensor& inv_freq,
                                 double attention_factor, bool /*interleaved*/) {
  check_rotary_positions_args(x, positions, inv_freq, attention_factor);
  return at::empty_symint(x.sym_sizes(), x.options());
}

}  // namespace

TORCH_LIBRARY_IMPL(attn, Meta, m) { m.impl("rotary_positions", TORCH_FN(rotary_positions_meta)); }

}  // namespace attn::ops::meta
