// The C++ entry points of the attn::flash_attention ops: one dispatcher call each, so C++, Python and
// TorchScript callers all reach the same Autograd and CPU kernels. The handles are typed by the schemas' C++
// form (flash_attention_schema.h), which also flattens the arguments.

#include <attn/ops/flash_attention.h>

#include "common/dtypes.h"
#include "ops/flash_attention_schema.h"
#ifdef ATTN_HAVE_CUDA_KERNELS
#include "ops/cuda/flash_attention_cuda.h"
#endif

#include <ATen/core/dispatch/Dispatcher.h>

namespace attn::ops {

bool FlashArguments::has_masks() const {
  return (key_padding_mask && key_padding_mask->defined()) || (attend_mask && attend_mask->defined()) ||
         (additive_mask && additive_mask->defined());
}
bool FlashArguments::has_alibi() const { return alibi_slopes && alibi_slopes->defined(); }
bool FlashArguments::has_sinks() const { return sinks && sinks->defined(); }
bool FlashArguments::packed() const { return cu_seqlens_q && cu_seqlens_q->defined(); }

std::tuple<torch::Tensor, torch::Tensor> flash_attention(const torch::Tensor& query, const torch::Tensor& key,
                                                         const torch::Tensor& value,
                                                         const FlashArguments& arguments) {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("attn::flash_attention", "")
                             .typed<FlashForwardSchema>();
  return call_forward(op, query, key, value, arguments);
}

std::tuple<torch::Tensor, torch::Tensor, torch::Tensor, torch::Tensor> flash_attention_backward(
    const torch::Tensor& grad_output, const torch::Tensor& query, const torch::Tensor& key,
    const torch::Tensor& value, const torch::Tensor& output, const torch::Tensor& logsumexp,
    const FlashArguments& arguments) {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("attn::flash_attention_backward", "")
                             .typed<FlashBackwardSchema>();
  return call_backward(op, grad_output, query, key, value, output, logsumexp, arguments);
}

FlashKernelSupport flash_attention_support(const torch::Tensor& query, const torch::Tensor& key,
                                           const torch::Tensor& value, const FlashArguments& arguments) {
  FlashKernelSupport s;
  if (query.is_cpu()) {
    if (!common::is_fused_kernel_dtype(query.scalar_type())) {
      s.reason = std::string("the CPU kernel computes float32, float64 and bfloat16, not ") +
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
