#pragma once
// Rotary position embeddings (RoPE): the frequencies, with the scalings open models use, and their
// application to queries and keys. The module that holds them is attn::RotaryEmbedding
// (<attn/modules/rotary_embedding.h>).

#include <torch/arg.h>
#include <torch/types.h>

#include <cstdint>
#include <optional>

namespace attn {

/// Which channels rotate together.
enum class RotaryPairing {
  /// Channel i with channel i + rotary_dim/2: GPT-NeoX, Llama and transformers' `rotate_half`.
  HalfSplit,
  /// Channel 2i with channel 2i + 1: GPT-J, and FlashAttention's `rotary_interleaved=True`.
  Interleaved,
};

/// How the frequencies are stretched for contexts longer than the model was trained on. Each matches the
/// transformers rope init function of the same name.
enum class RotaryScaling {
  None,        ///< "default": inv_freq_i = base^(-2i/rotary_dim)
  Linear,      ///< "linear": inv_freq / factor (position interpolation)
  DynamicNTK,  ///< "dynamic": base grows with the sequence length once it passes original_max_position
  YaRN,        ///< "yarn": per-frequency blend of interpolation and extrapolation, and an attention factor
  Llama3,      ///< "llama3": low frequencies / factor, high unchanged, a smooth blend between
};

/// The enumerator's name ("HalfSplit", "YaRN", ...), for messages and pretty_print.
const char* to_string(RotaryPairing pairing);
const char* to_string(RotaryScaling scaling);

struct RotaryEmbeddingOptions {
  /// rotary_dim: how many leading channels of each head rotate (even, at most head_dim). The rest pass
  /// through unchanged ("partial rotary", e.g. 0.25 · head_dim in GPT-NeoX and Phi).
  /* implicit */ RotaryEmbeddingOptions(int64_t rotary_dim) : rotary_dim_(rotary_dim) {}

  TORCH_ARG(int64_t, rotary_dim);
  /// θ, the base of the frequencies (rope_theta): 10000 in Llama 2, 500000 in Llama 3.
  TORCH_ARG(double, base) = 10000.0;
  TORCH_ARG(RotaryPairing, pairing) = RotaryPairing::HalfSplit;
  TORCH_ARG(RotaryScaling, scaling) = RotaryScaling::None;
  /// The scaling factor (Linear, DynamicNTK, YaRN, Llama3).
  TORCH_ARG(double, factor) = 1.0;
  /// The context length the model was trained on (DynamicNTK: max_position_embeddings; YaRN and Llama3:
  /// original_max_position_embeddings). Required by those three.
  TORCH_ARG(int64_t, original_max_position) = 0;
  /// YaRN's bounds, in rotations over original_max_position, of the blend between the two regimes.
  TORCH_ARG(double, beta_fast) = 32.0;
  TORCH_ARG(double, beta_slow) = 1.0;
  /// YaRN's factor on cos and sin; unset: 0.1 · ln(factor) + 1 (1 when factor <= 1).
  TORCH_ARG(std::optional<double>, attention_factor) = std::nullopt;
  /// Llama 3's wavelength thresholds, as divisors of original_max_position.
  TORCH_ARG(double, low_freq_factor) = 1.0;
  TORCH_ARG(double, high_freq_factor) = 4.0;
};

/// The inverse frequencies [rotary_dim / 2], float64, for sequences of `seq_len` positions (only
/// DynamicNTK depends on it), and the factor that multiplies cos and sin (1 except for YaRN).
struct RotaryFrequencies {
  torch::Tensor inv_freq;
  double attention_factor = 1.0;
};
RotaryFrequencies rotary_frequencies(const RotaryEmbeddingOptions& options, int64_t seq_len = 0);

/// cos and sin of positions · inv_freq, times the attention factor: [..., rotary_dim / 2] for integer
/// positions [...], in `dtype`, on the positions' device. Computed in float64, then converted.
std::tuple<torch::Tensor, torch::Tensor> rotary_cos_sin(const RotaryFrequencies& frequencies,
                                                        const torch::Tensor& positions, torch::Dtype dtype);

/// Rotates the first 2 · cos.size(-1) channels of x [..., T, head_dim] by the angles whose cos and sin are
/// given ([..., T, rotary_dim / 2], broadcasting to x's leading dimensions); the other channels pass
/// through. Differentiable. x is not modified.
torch::Tensor apply_rotary(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin,
                           RotaryPairing pairing = RotaryPairing::HalfSplit);

/// Rotates x [B, H, T, head_dim] or [H, T, head_dim] at integer positions [T] (or [B, T], one row per batch
/// row of a 4-D x) by `frequencies`, as rotary_cos_sin then apply_rotary would. On the CPU, where no gradient
/// is recorded, in one pass of the fused op attn::ops::rotary_positions (<attn/ops/rotary_positions.h>),
/// whose products are summed in float and rounded once; elsewhere through those two functions, and
/// differentiable. x is not modified.
torch::Tensor rotate_at_positions(const torch::Tensor& x, const torch::Tensor& positions,
                                  const RotaryFrequencies& frequencies,
                                  RotaryPairing pairing = RotaryPairing::HalfSplit);

}  // namespace attn
