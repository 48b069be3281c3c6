// RoPE's rotation: cos/sin from positions, and their application to q or k in either channel pairing.

#include <attn/rotary.h>

#include "common/checks.h"

#include <ATen/ATen.h>

namespace attn {

std::tuple<torch::Tensor, torch::Tensor> rotary_cos_sin(const RotaryFrequencies& frequencies,
                                                        const torch::Tensor& positions, torch::Dtype dtype) {
  constexpr const char* fn = "attn::rotary_cos_sin";
  TORCH_CHECK(frequencies.inv_freq.defined() && frequencies.inv_freq.dim() == 1, fn,
              ": inv_freq must be a 1-D tensor [rotary_dim / 2] (from attn::rotary_frequencies)");
  TORCH_CHECK(positions.defined() && at::isIntegralType(positions.scalar_type(), /*includeBool=*/false), fn,
              ": positions must be an integer tensor, got ",
              positions.defined() ? c10::toString(positions.scalar_type()) : "an undefined tensor");
  // float64 angles: position · frequency in float32 loses ~1e-3 rad by position 32k.
  const at::Tensor angles =
      positions.to(at::kDouble).unsqueeze(-1) * frequencies.inv_freq.to(positions.device()).to(at::kDouble);
  return {(angles.cos() * frequencies.attention_factor).to(dtype),
          (angles.sin() * frequencies.attention_factor).to(dtype)};
}

torch::Tensor apply_rotary(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin,
                           RotaryPairing pairing) {
  constexpr const char* fn = "attn::apply_rotary";
  TORCH_CHECK(x.defined() && x.dim() >= 2, fn, ": x must be [..., T, head_dim], got ",
              x.defined() ? x.sizes() : at::IntArrayRef{});
  common::check_floating(fn, "x", x);
  TORCH_CHECK(cos.defined() && sin.defined() && cos.sizes() == sin.sizes() && cos.dim() >= 2, fn,
              ": cos and sin must be [..., T, rotary_dim / 2] of the same shape, got cos ",
              cos.defined() ? cos.sizes() : at::IntArrayRef{}, " and sin ", sin.defined() ? sin.sizes() : at::IntArrayRef{});
  common::check_same_device_dtype(fn, "cos", cos, "x", x);
  common::check_same_device_dtype(fn, "sin", sin, "x", x);
  const int64_t half = cos.size(-1), rotary_dim = 2 * half;
  TORCH_CHECK(rotary_dim <= x.size(-1), fn, ": cos and sin rotate ", rotary_dim, " channels (2 x their last size ",
              half, ") but x has only head_dim = ", x.size(-1), "; x is ", x.sizes());
  TORCH_CHECK(cos.size(-2) == x.size(-2) || cos.size(-2) == 1, fn, ": cos and sin must have x's T = ", x.size(-2),
              " positions (or 1 to broadcast), got cos ", cos.sizes());

  const at::Tensor rot = x.narrow(-1, 0, rotary_dim);
  at::Tensor a, b;  // the two channels of each pair
  if (pairing == RotaryPairing::HalfSplit) {
    a = rot.narrow(-1, 0, half);
    b = rot.narrow(-1, half, half);
  } else {
    const at::Tensor pairs = rot.unflatten(-1, {half, 2});
    a = pairs.select(-1, 0);
    b = pairs.select(-1, 1);
  }
  // (a, b) -> (a cos - b sin, b cos + a sin)
  const at::Tensor ra = a * cos - b * sin, rb = b * cos + a * sin;
  const at::Tensor rotated = pairing == RotaryPairing::HalfSplit ? at::cat({ra, rb}, -1)
                                                                 : at::stack({ra, rb}, -1).flatten(-2);
  if (rotary_dim == x.size(-1)) return rotated;
  return at::cat({rotated, x.narrow(-1, rotary_dim, x.size(-1) - rotary_dim)}, -1);
}

}  // namespace attn
