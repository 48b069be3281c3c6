// Rotary position embeddings (<attn/rotary.h>): the enumerators' names, the inverse frequencies under each
// scaling, and the rotation of q or k at given positions in either channel pairing.

#include <attn/rotary.h>

#include "common/checks.h"
#include "ops/rotary_angles.h"

#include <attn/ops/rotary_positions.h>

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <cmath>

namespace attn {

// ---- Names ----

const char* to_string(RotaryPairing pairing) {
  switch (pairing) {
    case RotaryPairing::HalfSplit: return "HalfSplit";
    case RotaryPairing::Interleaved: return "Interleaved";
  }
  return "?";
}

const char* to_string(RotaryScaling scaling) {
  switch (scaling) {
    case RotaryScaling::None: return "None";
    case RotaryScaling::Linear: return "Linear";
    case RotaryScaling::DynamicNTK: return "DynamicNTK";
    case RotaryScaling::YaRN: return "YaRN";
    case RotaryScaling::Llama3: return "Llama3";
  }
  return "?";
}

// ---- Frequencies: each branch follows the transformers rope init function of the same name
// (modeling_rope_utils.py), so a checkpoint's rope_scaling config maps field by field (docs/rotary.md). ----

namespace {

constexpr const char* kRotaryFrequencies = "attn::rotary_frequencies";
constexpr double kPi = 3.14159265358979323846;

/// base^(-2i/dim) for i in [0, dim/2).
at::Tensor default_inv_freq(double base, int64_t dim) {
  const at::Tensor i2 = at::arange(0, dim, 2, at::TensorOptions().dtype(at::kDouble));
  return at::pow(base, -i2 / static_cast<double>(dim));
}

/// YaRN: the channel index at which a frequency makes `rotations` turns over `context` positions.
double correction_dim(double rotations, int64_t dim, double base, int64_t context) {
  return dim * std::log(context / (rotations * 2 * kPi)) / (2 * std::log(base));
}

void check(const RotaryEmbeddingOptions& o) {
  TORCH_CHECK(o.rotary_dim() > 0 && o.rotary_dim() % 2 == 0, kRotaryFrequencies,
              ": rotary_dim must be a positive even number, got ", o.rotary_dim());
  TORCH_CHECK(std::isfinite(o.base()) && o.base() > 1.0, kRotaryFrequencies,
              ": base must be finite and greater than 1, got ", o.base());
  if (o.scaling() == RotaryScaling::None) return;
  TORCH_CHECK(std::isfinite(o.factor()) && o.factor() > 0.0, kRotaryFrequencies,
              ": factor must be positive and finite for ", to_string(o.scaling()), " scaling, got ", o.factor());
  if (o.scaling() == RotaryScaling::Linear) return;
  TORCH_CHECK(o.original_max_position() > 0, kRotaryFrequencies, ": ", to_string(o.scaling()),
              " scaling needs original_max_position (the trained context length), got ", o.original_max_position());
  if (o.scaling() == RotaryScaling::YaRN) {
    TORCH_CHECK(o.beta_fast() > 0 && o.beta_slow() > 0, kRotaryFrequencies,
                ": YaRN's beta_fast and beta_slow must be positive, got ", o.beta_fast(), " and ", o.beta_slow());
  }
  if (o.scaling() == RotaryScaling::Llama3) {
    TORCH_CHECK(o.low_freq_factor() > 0 && o.high_freq_factor() > o.low_freq_factor(), kRotaryFrequencies,
                ": Llama3 scaling needs 0 < low_freq_factor < high_freq_factor, got ", o.low_freq_factor(), " and ",
                o.high_freq_factor());
  }
}

}  // namespace

RotaryFrequencies rotary_frequencies(const RotaryEmbeddingOptions& o, int64_t seq_len) {
  check(o);
  const int64_t dim = o.rotary_dim();
  switch (o.scaling()) {
    case RotaryScaling::None:
      return {default_inv_freq(o.base(), dim), 1.0};
    case RotaryScaling::Linear:
      return {default_inv_freq(o.base(), dim) / o.factor(), 1.0};
    case RotaryScaling::DynamicNTK: {
      // Unchanged up to the trained length; beyond it the base grows so the lowest frequency still fits.
      const double len = static_cast<double>(std::max(seq_len, o.original_max_position()));
      const double ratio = o.factor() * len / static_cast<double>(o.original_max_position()) - (o.factor() - 1.0);
      const double base = o.base() * std::pow(ratio, static_cast<double>(dim) / static_cast<double>(dim - 2));
      return {default_inv_freq(base, dim), 1.0};
    }
    case RotaryScaling::YaRN: {
      const double attention = o.attention_factor() ? *o.attention_factor()
                               : o.factor() <= 1.0  ? 1.0
                                                    : 0.1 * std::log(o.factor()) + 1.0;
      const at::Tensor extrapolation = default_inv_freq(o.base(), dim);
      const at::Tensor interpolation = extrapolation / o.factor();
      // Channels below `low` keep their frequency (many turns over the trained context), channels above
      // `high` are interpolated, and a linear ramp blends the ones between.
      const double low =
          std::max(std::floor(correction_dim(o.beta_fast(), dim, o.base(), o.original_max_position())), 0.0);
      double high = std::min(std::ceil(correction_dim(o.beta_slow(), dim, o.base(), o.original_max_position())),
                             static_cast<double>(dim - 1));
      if (high == low) high += 0.001;  // no division by zero
      const at::Tensor ramp =
          ((at::arange(dim / 2, at::TensorOptions().dtype(at::kDouble)) - low) / (high - low)).clamp(0.0, 1.0);
      const at::Tensor keep = 1.0 - ramp;  // 1: extrapolate (keep the frequency), 0: interpolate
      return {interpolation * (1.0 - keep) + extrapolation * keep, attention};
    }
    case RotaryScaling::Llama3: {
      const at::Tensor inv_freq = default_inv_freq(o.base(), dim);
      const double context = static_cast<double>(o.original_max_position());
      const double low_wavelen = context / o.low_freq_factor(), high_wavelen = context / o.high_freq_factor();
      const at::Tensor wavelen = 2 * kPi / inv_freq;
      const at::Tensor scaled = at::where(wavelen > low_wavelen, inv_freq / o.factor(), inv_freq);
      const at::Tensor smooth =
          (context / wavelen - o.low_freq_factor()) / (o.high_freq_factor() - o.low_freq_factor());
      const at::Tensor smoothed = (1.0 - smooth) * scaled / o.factor() + smooth * scaled;
      const at::Tensor medium = (wavelen >= high_wavelen).logical_and(wavelen <= low_wavelen);
      return {at::where(medium, smoothed, scaled), 1.0};
    }
  }
  TORCH_CHECK(false, kRotaryFrequencies, ": unknown RotaryScaling");
}

// ---- The rotation: cos/sin from positions, applied to q or k ----

std::tuple<torch::Tensor, torch::Tensor> rotary_cos_sin(const RotaryFrequencies& frequencies,
                                                        const torch::Tensor& positions, torch::Dtype dtype) {
  constexpr const char* fn = "attn::rotary_cos_sin";
  TORCH_CHECK(frequencies.inv_freq.defined() && frequencies.inv_freq.dim() == 1, fn,
              ": inv_freq must be a 1-D tensor [rotary_dim / 2] (from attn::rotary_frequencies)");
  common::check_integer(fn, "positions", positions);
  TORCH_CHECK(at::isFloatingType(dtype), fn, ": dtype must be a floating type (cos and sin are in it), got ",
              c10::toString(dtype));
  return ops::rotary_angle_table(positions, frequencies.inv_freq, frequencies.attention_factor, dtype);
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

torch::Tensor rotate_at_positions(const torch::Tensor& x, const torch::Tensor& positions,
                                  const RotaryFrequencies& frequencies, RotaryPairing pairing) {
  const torch::Tensor& inv_freq = frequencies.inv_freq;
  const bool records_grad = at::GradMode::is_enabled() && ((x.defined() && x.requires_grad()) ||
                                                            (inv_freq.defined() && inv_freq.requires_grad()));
  if (x.defined() && x.device().is_cpu() && !records_grad && inv_freq.defined() && inv_freq.device().is_cpu() &&
      positions.defined() && positions.device().is_cpu()) {
    return ops::rotary_positions(x, positions, inv_freq, frequencies.attention_factor,
                                 pairing == RotaryPairing::Interleaved);
  }
  auto [cos, sin] = rotary_cos_sin(frequencies, positions, x.scalar_type());
  if (positions.dim() == 2) {  // [B, T, r/2] -> [B, 1, T, r/2]: one angle per row, shared by the heads
    cos = cos.unsqueeze(1);
    sin = sin.unsqueeze(1);
  }
  return apply_rotary(x, cos, sin, pairing);
}

}  // namespace attn
