#pragma once
// The few-row linear operator, `attn::linear_rows`: x · Wᵀ + b for at most sixteen rows of x, the product of a
// decoding step (or of a speculative step's candidates). Called through the PyTorch dispatcher, like attn::decode_attention; most code reaches it
// through attn::linear or the modules' projections, which pick it when it applies.

#include <torch/types.h>

namespace attn::ops {

/// The most rows of input that attn::linear_rows takes (a decoding step of up to 16 sequences, or a token
/// tree of up to 16 candidates). Each weight row is multiplied with the rows four at a time while it is in L1.
inline constexpr int64_t kLinearRowsMax = 16;

/// input [..., in] with at most kLinearRowsMax rows (input.numel() / in), weight [out, in], bias [out] or
/// none -> [..., out], as at::linear. Each weight row is read once, in order, and multiplied with every row
/// of input; the sums are float32. float32 or bfloat16 (the three tensors alike), CPU. A weight whose rows
/// are not contiguous is copied first. Not differentiable: an inference kernel.
torch::Tensor linear_rows(const torch::Tensor& input, const torch::Tensor& weight,
                          const c10::optional<torch::Tensor>& bias = c10::nullopt);

}  // namespace attn::ops
