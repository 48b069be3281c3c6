// attn::ops::decode_attention_support: whether the decode op has a kernel for a call on its device. On CUDA
// the kernel's own file decides (ops/cuda/decode_attention_cuda.h).

#include <attn/ops/decode_attention.h>

#include "common/dtypes.h"
#ifdef ATTN_HAVE_CUDA_KERNELS
#include "ops/cuda/decode_attention_cuda.h"
#endif

#include <string>

namespace attn::ops {

DecodeKernelSupport decode_attention_support(const torch::Tensor& query, const torch::Tensor& key_cache,
                                             const torch::Tensor& value_cache) {
  if (query.is_cpu()) {
    if (common::is_decode_kernel_dtype(query.scalar_type())) return {true, ""};
    return {false, std::string("the CPU kernel computes float32, float64 and bfloat16, not ") +
                       common::dtype_name(query.scalar_type())};
  }
  if (query.is_cuda()) {
#ifdef ATTN_HAVE_CUDA_KERNELS
    return cuda::decode_support(query, key_cache, value_cache);
#else
    (void)key_cache, (void)value_cache;
    return {false, "attn was built without its CUDA kernels (a LibTorch without CUDA, or no nvcc)"};
#endif
  }
  return {false, "no decode kernel runs on " + query.device().str()};
}

}  // namespace attn::ops
