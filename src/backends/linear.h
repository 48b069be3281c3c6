#pragma once
// x · Wᵀ + b for the modules' projections and attn::linear, with the product chosen for the number of rows: a
// decoding step projects one row per sequence, and a GEMM of so few rows packs the whole weight matrix
// before reading it (5x slower than a matrix-vector product on LibTorch 1.13 with OpenBLAS, measured on a
// 1536 x 576 weight), while the PyTorch wheel's matrix-vector product streams the weight at a quarter of the
// memory's rate on an AMD Zen 4 (bench/RESULTS.md, issue 13). Where LibTorch has no bfloat16 GEMM (x86 without
// AVX-512, ops/torch_bfloat16_gemm.h), bfloat16 takes the kernel for up to kLinearRowsMax rows of any width and
// is widened to float for more; where its bfloat16 GEMM is emulated (AVX-512 without AVX512-BF16), bfloat16
// takes the kernel for up to kLinearRowsMax rows of any width; where it runs on AVX512-BF16 pairs slower than the
// float FMA (ops::torch_bfloat16_gemm_trails_float), kWidenedGemmMinRows rows or more are widened to float, the
// weight a block at a time.

#include <torch/types.h>

#include <vector>

namespace attn::backends {

/// Whether project_rows runs attn::linear_rows: x holds one row, or at most 4 rows of 4096 elements in all, or
/// at most kLinearRowsMax rows of 16384 (of any width, in bfloat16 where LibTorch has no bfloat16 GEMM or
/// emulates it); x and weight are float32 or bfloat16 on the CPU; and no gradient is recorded.
bool takes_linear_rows(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias);

/// at::linear(x, weight, bias): through attn::linear_rows where takes_linear_rows; else, in bfloat16 of
/// kWidenedGemmMinRows rows or more without a gradient where LibTorch's bfloat16 GEMM trails the float one, through
/// the float GEMM on x widened and the weight widened a block at a time; else, in bfloat16 where LibTorch has no
/// bfloat16 GEMM, through at::linear on the inputs widened to float, rounded back once (with gradients); else
/// through a matrix-vector product for a single row on the CPU; else at::linear.
torch::Tensor project_rows(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias);

/// project_rows(x, weights[k], biases[k]) for each k (biases: one per weight, undefined for none), where every
/// product takes attn::linear_rows in one call of attn::linear_rows_many: one pass over all the weights.
std::vector<torch::Tensor> project_rows_many(const torch::Tensor& x, const std::vector<torch::Tensor>& weights,
                                             const std::vector<torch::Tensor>& biases);

}  // namespace attn::backends
