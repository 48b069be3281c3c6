#pragma once
// Column-major GEMM through the BLAS that LibTorch itself runs on (OpenBLAS on Debian, MKL in PyTorch's
// wheels), so the fused kernels' tile products are as fast as torch::mm.

#include <cstdint>

namespace attn::ops::cpu {

/// C = alpha · op(A) · op(B) + beta · C, column-major, as BLAS ?gemm. All sizes and leading dimensions must
/// fit in 32 bits (the caller's tiles do).
void blas_gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
               int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc);
void blas_gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha, const double* a,
               int64_t lda, const double* b, int64_t ldb, double beta, double* c, int64_t ldc);

}  // namespace attn::ops::cpu
