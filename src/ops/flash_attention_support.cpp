// attn::ops::flash_attention_support: whether the fused op has a kernel for a call on its device, and which.
// On CUDA the kernels' own file decides (ops/cuda/flash_attention_cuda.h).

#include <attn/ops/flash_attention.h>

#include "common/dtypes.h"
#ifdef ATTN_HAVE_CUDA_KERNELS
#include "ops/cuda/flash_attention_cuda.h"
#endif

#include <string>

namespace attn::ops {

FlashKernelSupport flash_attention_support(const torch::Tensor& query, const torch::Tensor& key,
                                           const torch::Tensor& value, const FlashArguments& arguments) {
  FlashKernelSupport s;
  if (query.is_cpu()) {
    if (!common::is_fused_kernel_dtype(query.scalar_type())) {
      s.reason = std::string("the CPU kernel computes float32, float64, bfloat16 and float16, not ") +
                 common::dtype_name(query.scalar_type());
      return s;
    }
    s.forward = s.backward = true;
    s.route = "cpu";
    return s;
  }
  if (query.is_cuda()) {
#ifdef ATTN_HAVE_CUDA_KERNELS
    const cuda::VariantSupport v = cuda::variant_support(query, key, value, arguments);
    s.forward = v.forward != cuda::VariantRoute::None;
    s.backward = s.forward && v.backward;
    if (s.forward) s.route = cuda::route_name(v.forward);
    s.reason = v.reason;
#else
    (void)key, (void)value, (void)arguments;
    s.reason = "attn was built without its CUDA kernels (a LibTorch without CUDA, or no nvcc)";
#endif
    return s;
  }
  s.reason = "no attn kernel runs on " + query.device().str();
  return s;
}

}  // namespace attn::ops
