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
  TORCH_CHECK(x.dim() == 3 || x.dim() == 4, kRotaryPositionsOp,
              ": x must be [B, H, T, head_dim] or [H, T, head_dim], got ", x.sym_sizes());
  TORCH_CHECK(positions.device() == x.device() && inv_freq.device() == x.device(), kRotaryPositionsOp,
              ": positions and inv_freq must be on x's device ", x.device(), ", got ", positions.device(), " and ",
              inv_freq.device());
  TORCH_CHECK(at::isIntegralType(positions.scalar_type(), /*includeBool=*/false), kRotaryPositionsOp,
              ": positions must be an integer tensor, got ", common::dtype_name(positions));
  const c10::SymInt T = x.sym_size(-2);
  TORCH_CHECK(positions.dim() == 1 || (positions.dim() == 2 && x.dim() == 4), kRotaryPositionsOp,
              ": positions must be [T]", x.dim() == 4 ? " or [B, T]" : "", " for x ", x.sym_sizes(), ", got ",
              positions.sym_sizes());
  if (positions.dim() == 1) {
    TORCH_CHECK(positions.sym_size(0) == T, kRotaryPositionsOp, ": positions must be [T] = [", T, "] for x ",
                x.sym_sizes(), ", got ", positions.sym_sizes());
  } else {
    TORCH_CHECK(positions.sym_size(0) == x.sym_size(0) && positions.sym_size(1) == T, kRotaryPositionsOp,
                ": positions must be [B, T] = [", x.sym_size(0), ", ", T, "] for x ", x.sym_sizes(), ", got ",
                positions.sym_sizes());
  }
  TORCH_CHECK(at::isFloatingType(inv_freq.scalar_type()) && inv_freq.dim() == 1, kRotaryPositionsOp,
              ": inv_freq must be a floating 1-D tensor [rotary_dim / 2], got ", common::dtype_name(inv_freq), " ",
              inv_freq.sym_sizes());
  TORCH_CHECK(inv_freq.sym_size(0) * 2 <= x.sym_size(-1), kRotaryPositionsOp, ": inv_freq ", inv_freq.sym_sizes(),
              " rotates ", inv_freq.sym_size(0) * 2, " channels, more than x's head_dim = ", x.sym_size(-1));
  TORCH_CHECK(std::isfinite(attention_factor), kRotaryPositionsOp, ": attention_factor must be finite, got ",
              attention_factor);
}

}  // namespace attn::ops
