#pragma once
// What the CUDA decode kernel takes (src/ops/cuda/decode_attention_cuda.cu), for decode_attention_support.
// Compiled only where attn builds its CUDA kernels (ATTN_HAVE_CUDA_KERNELS).

#include <attn/ops/decode_attention.h>

#include <ATen/core/Tensor.h>

namespace attn::ops::cuda {

/// The CUDA kernel's half of attn::ops::decode_attention_support, for tensors on a CUDA device.
DecodeKernelSupport decode_support(const at::Tensor& query, const at::Tensor& key_cache, const at::Tensor& value_cache);

}  // namespace attn::ops::cuda
