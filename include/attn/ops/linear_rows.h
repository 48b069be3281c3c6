#pragma once
// The few-row linear operators, `attn::linear_rows` and `attn::linear_rows_many`: x · Wᵀ + b for at most
// sixteen rows of x, the products of a decoding step (or of a speculative step's candidates). Called through
// the PyTorch dispatcher, like attn::decode_attention; most code reaches them through attn::linear,
// attn::linear_many or the modules' projections, which pick them when they apply.

#include <torch/types.h>

#include <vector>

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

/// input [..., in] times each of weights[k] [out_k, in], plus biases[k] [out_k] -> one tensor [..., out_k] per
/// weight, each as linear_rows(input, weights[k], biases[k]) gives it, in one pass over all the weights' rows:
/// for the products that share an input, such as a layer's q, k and v projections (a decoding step's short
/// weights, each its own pass, spend much of it starting and ending). biases empty: none; an entry None: none
/// for that weight. The same dtypes, limits and CPU as linear_rows; not differentiable.
std::vector<torch::Tensor> linear_rows_many(const torch::Tensor& input, at::TensorList weights,
                                            const c10::List<c10::optional<torch::Tensor>>& biases =
                                                c10::List<c10::optional<torch::Tensor>>());

}  // namespace attn::ops
