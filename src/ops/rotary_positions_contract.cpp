#include "ops/rotary_positions_contract.h"

#include "common/checks.h"
#include "common/dtypes.h"

#include <ATen/ATen.h>

#include <cmath>

namespace attn::ops {

void check_rotary_positions_args(const at::Tensor& x, const at::Tensor& positions, const at::Tensor& inv_freq,
                                 double attention_factor) {
  TORCH_CHECK(x.defined() && positions.defined() && inv_freq.defined(), kRotaryPositionsOp,
              ": x, positions and inv_freq must be defined tensors");
  TORCH_CHECK(x.device().is_cpu() || x.device().is_meta(), kRotaryPositionsOp, ": x must be on the CPU, got ",
              x.device());
  common::check_floating(kRotaryPositionsOp, "x", x);
  common::check_rotary_positions(kRotaryPositionsOp, x, positions);
  TORCH_CHECK(inv_freq.device() == x.device(), kRotaryPositionsOp, ": inv_freq must be on x's device ", x.device(),
              ", got ", inv_freq.device());
  TORCH_CHECK(at::isFloatingType(inv_freq.scalar_type()) && inv_freq.dim() == 1, kRotaryPositionsOp,
              ": inv_freq must be a floating 1-D tensor [rotary_dim / 2], got ", common::dtype_name(inv_freq), " ",
              inv_freq.sym_sizes());
  TORCH_CHECK(inv_freq.sym_size(0) * 2 <= x.sym_size(-1), kRotaryPositionsOp, ": inv_freq ", inv_freq.sym_sizes(),
              " rotates ", inv_freq.sym_size(0) * 2, " channels, more than x's head_dim = ", x.sym_size(-1));
  TORCH_CHECK(std::isfinite(attention_factor), kRotaryPositionsOp, ": attention_factor must be finite, got ",
              attention_factor);
}

}  // namespace attn::ops
