// The C++ entry points of the attn::flash_attention ops: one dispatcher call each, so C++, Python and
// TorchScript callers all reach the same Autograd and CPU kernels. Each handle is typed by the declaration in
// the public header, so the signature is spelled once (there) besides the schema (registration.cpp).

#include <attn/ops/flash_attention.h>

#include "common/dtypes.h"
#ifdef ATTN_HAVE_CUDA_KERNELS
#include "ops/cuda/flash_attention_cuda.h"
#endif

#include <ATen/core/dispatch/Dispatcher.h>

namespace attn::ops {

std::tuple<torch::Tensor, torch::Tensor> flash_attention(
    const torch::Tensor& query, const torch::Tensor& key, const torch::Tensor& value,
    const c10::optional<torch::Tensor>& key_padding_mask, const c10::optional<torch::Tensor>& attend_mask,
    const c10::optional<torch::Tensor>& additive_mask, bool is_causal, int64_t causal_offset,
    c10::optional<double> scale, int64_t window_left, int64_t window_right, double softcap,
    const c10::optional<torch::Tensor>& alibi_slopes, const c10::optional<torch::Tensor>& sinks,
    const c10::optional<torch::Tensor>& cu_seqlens_q, const c10::optional<torch::Tensor>& cu_seqlens_k) {
  static const auto op =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow("attn::flash_attention", "")
          .typed<decltype(flash_attention)>();
  return op.call(query, key, value, key_padding_mask, attend_mask, additive_mask, is_causal, causal_offset, scale,
                 window_left, window_right, softcap, alibi_slopes, sinks, cu_seqlens_q, cu_seqlens_k);
}

std::tuple<torch::Tensor, torch::Tensor, torch::Tensor, torch::Tensor> flash_attention_backward(
    const torch::Tensor& grad_output, const torch::Tensor& query, const torch::Tensor& key,
    const torch::Tensor& value, const torch::Tensor& output, const torch::Tensor& logsumexp,
    const c10::optional<torch::Tensor>& key_padding_mask, const c10::optional<torch::Tensor>& attend_mask,
    const c10::optional<torch::Tensor>& additive_mask, bool is_causal, int64_t causal_offset,
    c10::optional<double> scale, int64_t window_left, int64_t window_right, double softcap,
    const c10::optional<torch::Tensor>& alibi_slopes, const c10::optional<torch::Tensor>& sinks,
    const c10::optional<torch::Tensor>& cu_seqlens_q, const c10::optional<torch::Tensor>& cu_seqlens_k) {
  static const auto op =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow("attn::flash_attention_backward", "")
          .typed<decltype(flash_attention_backward)>();
  return op.call(grad_output, query, key, value, output, logsumexp, key_padding_mask, attend_mask, additive_mask,
                 is_causal, causal_offset, scale, window_left, window_right, softcap, alibi_slopes, sinks,
                 cu_seqlens_q, cu_seqlens_k);
}

FlashKernelSupport flash_attention_support(const torch::Tensor& query, const torch::Tensor& key,
                                           const torch::Tensor& value, const FlashCall& call) {
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
    const cuda::VariantSupport v = cuda::variant_support(query, key, value, call);
    s.forward = v.forward != cuda::VariantRoute::None;
    s.backward = s.forward && v.backward;
    if (s.forward) s.route = cuda::route_name(v.forward);
    s.reason = v.reason;
#else
    (void)key, (void)value, (void)call;
    s.reason = "attn was built without its CUDA kernels (a LibTorch without CUDA, or no nvcc)";
#endif
    return s;
  }
  s.reason = "no attn kernel runs on " + query.device().str();
  return s;
}

}  // namespace attn::ops
