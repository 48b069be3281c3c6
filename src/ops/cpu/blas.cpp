#include "ops/cpu/blas.h"

#include <torch/version.h>

#if TORCH_VERSION_MAJOR >= 2
#include <ATen/native/CPUBlas.h>
#else
// LibTorch 1.x does not export at::native::cpublas::gemm, so call the Fortran BLAS it links (libblas.so.3).
extern "C" {
void sgemm_(const char* transa, const char* transb, const int* m, const int* n, const int* k, const float* alpha,
            const float* a, const int* lda, const float* b, const int* ldb, const float* beta, float* c,
            const int* ldc);
void dgemm_(const char* transa, const char* transb, const int* m, const int* n, const int* k, const double* alpha,
            const double* a, const int* lda, const double* b, const int* ldb, const double* beta, double* c,
            const int* ldc);
}
#endif

namespace attn::ops::cpu {
namespace {

#if TORCH_VERSION_MAJOR >= 2
at::native::TransposeType op(bool trans) {
  return trans ? at::native::TransposeType::Transpose : at::native::TransposeType::NoTranspose;
}
#endif

template <typename T, typename Fortran>
void call(Fortran fortran, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, T alpha, const T* a,
          int64_t lda, const T* b, int64_t ldb, T beta, T* c, int64_t ldc) {
#if TORCH_VERSION_MAJOR >= 2
  (void)fortran;
  at::native::cpublas::gemm(op(trans_a), op(trans_b), m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
#else
  const char ta = trans_a ? 'T' : 'N', tb = trans_b ? 'T' : 'N';
  const int im = static_cast<int>(m), in = static_cast<int>(n), ik = static_cast<int>(k);
  const int ila = static_cast<int>(lda), ilb = static_cast<int>(ldb), ilc = static_cast<int>(ldc);
  fortran(&ta, &tb, &im, &in, &ik, &alpha, a, &ila, b, &ilb, &beta, c, &ilc);
#endif
}

}  // namespace

void blas_gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
               int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
#if TORCH_VERSION_MAJOR >= 2
  call<float>(nullptr, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
#else
  call<float>(&sgemm_, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
#endif
}

void blas_gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha, const double* a,
               int64_t lda, const double* b, int64_t ldb, double beta, double* c, int64_t ldc) {
#if TORCH_VERSION_MAJOR >= 2
  call<double>(nullptr, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
#else
  call<double>(&dgemm_, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
#endif
}

}  // namespace attn::ops::cpu
