#pragma once
// x · Wᵀ + b for the modules' projections, with the product chosen for the number of rows: a decoding step
// projects one row, and a GEMM of one row packs the whole weight matrix before reading it (5x slower than a
// matrix-vector product on LibTorch 1.13 with OpenBLAS, measured on a 1536 x 576 weight).

#include <torch/types.h>

namespace attn::modules {

/// at::linear(x, weight, bias), through a matrix-vector product when x holds a single row on the CPU.
torch::Tensor project_rows(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias);

}  // namespace attn::modules
