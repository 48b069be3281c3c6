#pragma once
// The fused rotary operator, `attn::rotary_positions`: rotates the channel pairs of q or k by position ·
// frequency in one pass, where attn::rotary_cos_sin and attn::apply_rotary take about twenty tensor operations
// (a decoding step of a 30-layer model rotates 60 times). Called through the PyTorch dispatcher, like
// attn::linear_rows; most code reaches it through attn::rotate_at_positions or RotaryEmbedding, which pick it
// when it applies.

#include <torch/types.h>

namespace attn::ops {

/// x [B, H, T, head_dim] or [H, T, head_dim]; positions [T] or, with a 4-D x, [B, T] (integers); inv_freq
/// [rotary_dim / 2] with rotary_dim <= head_dim. Each pair (a, b) of the first rotary_dim channels (a = i,
/// b = i + rotary_dim / 2, or a = 2i, b = 2i + 1 if interleaved) becomes (a·c - b·s, b·c + a·s) with
/// c, s = cos, sin(position · inv_freq[i]) · attention_factor, the angle in float64 and c, s rounded to x's
/// dtype, as attn::rotary_cos_sin gives them; the products are summed in float (float64 for float64) and
/// rounded once. The other channels pass through. Returns a new contiguous tensor; x is not modified.
/// float32, float64, bfloat16 or (with LibTorch 2.x) float16 on the CPU. Not differentiable: an inference
/// kernel.
torch::Tensor rotary_positions(const torch::Tensor& x, const torch::Tensor& positions, const torch::Tensor& inv_freq,
                               double attention_factor = 1.0, bool interleaved = false);

}  // namespace attn::ops
