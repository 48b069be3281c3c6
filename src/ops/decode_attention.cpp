// The C++ entry point of the attn::decode_attention op: one dispatcher call.

#include <attn/ops/decode_attention.h>

#include "common/dtypes.h"
#ifdef ATTN_HAVE_CUDA_KERNELS
#include "ops/cuda/decode_attention_cuda.h"
#endif

#include <ATen/core/dispatch/Dispatcher.h>

namespace attn::ops {

torch::Tensor decode_attention(const torch::Tensor& query, const torch::Tensor& key_cache,
                               const torch::Tensor& value_cache, const torch::Tensor& query_starts,
                               const torch::Tensor& key_lengths, bool is_causal, c10::optional<double> scale,
                               int64_t window_left, int64_t window_right, double softcap,
                               const c10::optional<torch::Tensor>& alibi_slopes,
                               const c10::optional<torch::Tensor>& sinks) {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("attn::decode_attention", "")
                             .typed<decltype(decode_attention)>();
  return op.call(query, key_cache, value_cache, query_starts, key_lengths, is_causal, scale, window_left,
                 window_right, softcap, alibi_slopes, sinks);
}

DecodeKernelSupport decode_attention_support(const torch::Tensor& query, const torch::Tensor& key_cache,
                                             const torch::Tensor& value_cache) {
  if (query.is_cpu()) {
    if (common::is_fused_kernel_dtype(query.scalar_type())) return {true, ""};
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
