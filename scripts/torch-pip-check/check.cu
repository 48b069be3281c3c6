// A CUDA kernel and its launch: proves nvcc compiles against the wheel's headers and the result links.
// Nothing here runs it (check.cpp only launches it where a GPU is present).
#include <ATen/core/Tensor.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>

namespace {
__global__ void scale(float* x, float a, int64_t n) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) x[i] *= a;
}
}  // namespace

void scale_cuda(at::Tensor& x, float a) {
  const int64_t n = x.numel();
  scale<<<(n + 255) / 256, 256, 0, at::cuda::getCurrentCUDAStream()>>>(x.data_ptr<float>(), a, n);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}
