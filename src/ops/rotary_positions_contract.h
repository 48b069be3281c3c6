#pragma once
// What every kernel of attn::rotary_positions agrees on: the checks of its arguments. The CPU kernel and the
// Meta kernel (ops/meta/) both use it; the result has x's shape.

#include <ATen/core/Tensor.h>

namespace attn::ops {

inline constexpr const char* kRotaryPositionsOp = "attn::rotary_positions";

/// Checks x [B, H, T, head_dim] or [H, T, head_dim] (a dtype common::check_floating admits), positions [T] or [B, T] (integers, [B, T] only
/// with a 4-D x), inv_freq [rotary_dim / 2] (floating, rotary_dim <= head_dim) and a finite attention_factor,
/// the tensors on x's device, which is the CPU or the meta device.
void check_rotary_positions_args(const at::Tensor& x, const at::Tensor& positions, const at::Tensor& inv_freq,
                                 double attention_factor);

}  // namespace attn::ops
