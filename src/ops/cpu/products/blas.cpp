// The tile GEMM, through the fastest route this LibTorch build offers (decided by CMake):
//   ATTN_HAVE_CPUBLAS_GEMM    at::native::cpublas::gemm, LibTorch's own BLAS wrapper, when it is exported
//                             (it is not on 1.13)
//   ATTN_HAVE_FORTRAN_BLAS    the Fortran ?gemm_ of the BLAS LibTorch links (libblas.so.3: OpenBLAS on Debian)
//   neither                   at::addmm_ on views of the tiles: correct everywhere, with a few microseconds
//                             of dispatcher overhead per tile
// In PyTorch's wheels the Fortran sgemm_ that the dynamic linker binds is MKL's, exported by libtorch_cpu.so.

#include "ops/cpu/products/blas.h"

#include <dlfcn.h>

#if defined(ATTN_HAVE_CPUBLAS_GEMM)
#include <ATen/native/CPUBlas.h>
#elif defined(ATTN_HAVE_FORTRAN_BLAS)
extern "C" {
void sgemm_(const char* transa, const char* transb, const int* m, const int* n, const int* k, const float* alpha,
            const float* a, const int* lda, const float* b, const int* ldb, const float* beta, float* c,
            const int* ldc);
void dgemm_(const char* transa, const char* transb, const int* m, const int* n, const int* k, const double* alpha,
            const double* a, const int* lda, const double* b, const int* ldb, const double* beta, double* c,
            const int* ldc);
}
#else
#include <ATen/ATen.h>
#endif

namespace attn::ops::cpu {
namespace {

#if defined(ATTN_HAVE_CPUBLAS_GEMM)
at::native::TransposeType op(bool trans) {
  return trans ? at::native::TransposeType::Transpose : at::native::TransposeType::NoTranspose;
}

template <typename T>
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, T alpha, const T* a, int64_t lda,
          const T* b, int64_t ldb, T beta, T* c, int64_t ldc) {
  at::native::cpublas::gemm(op(trans_a), op(trans_b), m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

#elif defined(ATTN_HAVE_FORTRAN_BLAS)
void fortran_gemm(const char* ta, const char* tb, const int* m, const int* n, const int* k, const float* alpha,
                  const float* a, const int* lda, const float* b, const int* ldb, const float* beta, float* c,
                  const int* ldc) {
  sgemm_(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
void fortran_gemm(const char* ta, const char* tb, const int* m, const int* n, const int* k, const double* alpha,
                  const double* a, const int* lda, const double* b, const int* ldb, const double* beta, double* c,
                  const int* ldc) {
  dgemm_(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

template <typename T>
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, T alpha, const T* a, int64_t lda,
          const T* b, int64_t ldb, T beta, T* c, int64_t ldc) {
  const char ta = trans_a ? 'T' : 'N', tb = trans_b ? 'T' : 'N';
  const int im = static_cast<int>(m), in = static_cast<int>(n), ik = static_cast<int>(k);
  const int ila = static_cast<int>(lda), ilb = static_cast<int>(ldb), ilc = static_cast<int>(ldc);
  fortran_gemm(&ta, &tb, &im, &in, &ik, &alpha, a, &ila, b, &ilb, &beta, c, &ilc);
}

#else
/// A column-major rows x cols matrix with leading dimension ld, as a tensor view (no copy).
template <typename T>
at::Tensor column_major(const T* data, int64_t rows, int64_t cols, int64_t ld) {
  return at::from_blob(const_cast<T*>(data), {rows, cols}, {1, ld},
                       at::TensorOptions().dtype(c10::CppTypeToScalarType<T>::value));
}

template <typename T>
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, T alpha, const T* a, int64_t lda,
          const T* b, int64_t ldb, T beta, T* c, int64_t ldc) {
  const at::Tensor A = trans_a ? column_major(a, k, m, lda).t() : column_major(a, m, k, lda);
  const at::Tensor B = trans_b ? column_major(b, n, k, ldb).t() : column_major(b, k, n, ldb);
  at::Tensor C = column_major(c, m, n, ldc);
  C.addmm_(A, B, beta, alpha);  // beta = 0 ignores C's contents, NaN included
}
#endif

// Each tile GEMM must run on the thread that calls it: the kernels already run one task per LibTorch thread.
// OpenBLAS does so inside a parallel region by itself. MKL (linked into PyTorch's wheels) does not: LibTorch's
// set_num_threads hands MKL the caller's thread count and turns MKL's dynamic adjustment off, so an MKL gemm
// from a worker may split itself again, which oversubscribes the cores and makes the rounding depend on the
// thread count. Where the process has MKL, its thread-local setting is pinned to 1 around each call.
class BlasOnThisThread {
 public:
  BlasOnThisThread() : saved_(set_local_threads() ? set_local_threads()(1) : 0) {}
  ~BlasOnThisThread() {
    if (set_local_threads()) set_local_threads()(saved_);  // 0 restores "use the global setting"
  }
  BlasOnThisThread(const BlasOnThisThread&) = delete;
  BlasOnThisThread& operator=(const BlasOnThisThread&) = delete;

 private:
  using SetLocalThreads = int (*)(int);  // MKL's C interface; returns the previous thread-local value
  static SetLocalThreads set_local_threads() {
    static const auto fn = reinterpret_cast<SetLocalThreads>(dlsym(RTLD_DEFAULT, "MKL_Set_Num_Threads_Local"));
    return fn;
  }
  int saved_;
};

}  // namespace

void blas_gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
               int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  const BlasOnThisThread one_thread;
  gemm<float>(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void blas_gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha, const double* a,
               int64_t lda, const double* b, int64_t ldb, double beta, double* c, int64_t ldc) {
  const BlasOnThisThread one_thread;
  gemm<double>(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

}  // namespace attn::ops::cpu
