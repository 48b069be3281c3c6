#pragma once
// The one backend decision: resolve options.backend() (Auto included) once, then call that backend.

#include <attn/ops/flash_attention.h>
#include <attn/options.h>

#include <torch/types.h>

#include <string>
#include <tuple>

namespace attn::backends {

/// The backend that will run: options.backend(), or Auto's choice; refuses a backend that cannot do what is
/// asked (weights, dropout, device, dtype, a variant without a kernel), naming what to use instead. `packed`:
/// query, key and value are packed sequences in the op's [1, H, total, d] layout (varlen_attention). `fn`
/// names the caller in errors.
Backend resolve(const char* fn, const torch::Tensor& query, const torch::Tensor& key, const torch::Tensor& value,
                const SdpaOptions& options, bool need_weights, bool packed = false);

/// The attn::flash_attention op's arguments for a call with `options` on query [..., Tq, d] and key
/// [..., Tk, d]: the masks as the options hold them, the causal offset of their alignment (0 for packed
/// sequences, which align each sequence's own diagonal inside the op), the scale and the variants. The fused
/// backend then brings the masks, the slopes and the packed boundaries to the op's layout.
ops::FlashArguments flash_arguments(const torch::Tensor& query, const torch::Tensor& key, const SdpaOptions& options,
                                    bool packed);

/// What resolve() picks, with the kernel behind it: "math", "fused (cpu)", "fused (cuda:libtorch)",
/// "fused (cuda:attn)", or "torch (KERNEL)" with the kernel LibTorch's SDPA picks (flash, efficient, cudnn, math).
std::string route(const char* fn, const torch::Tensor& query, const torch::Tensor& key, const torch::Tensor& value,
                  const SdpaOptions& options, bool need_weights, bool packed = false);

/// Attention on validated inputs (backends/validate.h, or a module's own checks) by the resolved backend:
/// (output, weights), the weights only when `need_weights` (else undefined).
std::tuple<torch::Tensor, torch::Tensor> attention(const char* fn, const torch::Tensor& query, const torch::Tensor& key,
                                                   const torch::Tensor& value, const SdpaOptions& options,
                                                   bool need_weights);

}  // namespace attn::backends
