#pragma once
// Which CUDA route of attn::flash_attention takes a call (src/ops/cuda/flash_attention_cuda.cu), for
// flash_attention_support. Compiled only where attn builds its CUDA kernels (ATTN_HAVE_CUDA_KERNELS).

#include <attn/ops/flash_attention.h>

#include <ATen/core/Tensor.h>

#include <string>

namespace attn::ops::cuda {

enum class VariantRoute {
  None,
  Library,  ///< LibTorch's kernels: FlashAttention-2 (at::_flash_attention_forward / _backward), and for sinks
            ///< alone the SDPA kernel that gives the log-sum-exp (cuDNN's or FlashAttention's)
  Own,      ///< attn's own tensor-core kernel (forward only)
};

struct VariantSupport {
  VariantRoute forward = VariantRoute::None;
  bool backward = false;
  std::string reason;  ///< why not, where forward is None or backward is false
};

/// The route of a flash_attention call on CUDA tensors.
VariantSupport variant_support(const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
                               const FlashArguments& call);

/// The route's name, as flash_attention_support reports it.
const char* route_name(VariantRoute route);

}  // namespace attn::ops::cuda
