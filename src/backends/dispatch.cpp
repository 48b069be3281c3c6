// Backend choice: validated once, decided once, then one call into the chosen implementation.

#include "backends/dispatch.h"

#include "backends/implementations.h"
#include "backends/masks.h"
#include "backends/op_arguments.h"
#include "common/checks.h"

#include <attn/ops/flash_attention.h>

#include <torch/version.h>

#include <string>

namespace attn::backends {
namespace {

/// The option that needs a gradient which attn's op does not compute (it takes the additive mask and the ALiBi
/// slopes as constants), or nullptr.
const char* constant_needing_grad(const SdpaOptions& options) {
  if (!at::GradMode::is_enabled()) return nullptr;
  const torch::Tensor& add = options.masks().additive_mask();
  if (add.defined() && add.requires_grad()) return "additive_mask";
  const torch::Tensor& slopes = options.alibi_slopes();
  if (slopes.defined() && slopes.requires_grad()) return "alibi_slopes";
  return nullptr;
}

/// Whether the call records a graph for gradients of q, k, v or the sinks.
bool needs_grad(const torch::Tensor& query, const torch::Tensor& key, const torch::Tensor& value,
                const SdpaOptions& options) {
  const bool sinks = options.sinks().defined() && options.sinks().requires_grad();
  return at::GradMode::is_enabled() && (query.requires_grad() || key.requires_grad() || value.requires_grad() || sinks);
}

/// The variants that LibTorch's SDPA has no blockwise form of: on CUDA they go to attn's op where it takes them.
bool has_variants(const SdpaOptions& options) {
  return options.attention().has_window() || options.alibi_slopes().defined() || needs_score_terms(options);
}

/// Whether attn's op has a kernel for this call on the inputs' device, both ways when gradients are recorded.
ops::FlashKernelSupport op_support(const torch::Tensor& query, const torch::Tensor& key, const torch::Tensor& value,
                                   const SdpaOptions& options, bool packed) {
  return ops::flash_attention_support(query, key, value, flash_arguments(query, key, options, packed));
}

}  // namespace

ops::FlashArguments flash_arguments(const torch::Tensor& query, const torch::Tensor& key, const SdpaOptions& options,
                                    bool packed) {
  const AttentionMasks& masks = options.masks();
  ops::FlashArguments a;
  a.key_padding_mask = optional_tensor(masks.key_padding_mask());
  a.attend_mask = optional_tensor(masks.attend_mask());
  a.additive_mask = optional_tensor(masks.additive_mask());
  a.is_causal = options.causal();
  a.causal_offset = packed ? 0 : causal_offset(query.size(-2), key.size(-2), options.causal_alignment());
  a.scale = optional_scale(options);
  a.window_left = options.window_left(), a.window_right = options.window_right();
  a.softcap = options.softcap();
  a.alibi_slopes = optional_tensor(options.alibi_slopes());
  a.sinks = optional_tensor(options.sinks());
  return a;
}

Backend resolve(const char* fn, const torch::Tensor& query, const torch::Tensor& key, const torch::Tensor& value,
                const SdpaOptions& options, bool need_weights, bool packed) {
  const Backend asked = options.backend();
  if (asked != Backend::Math && asked != Backend::Auto) {
    TORCH_CHECK(!need_weights, fn, ": Backend::", to_string(asked),
                " does not return attention weights; use Backend::Math or Backend::Auto");
  }
  switch (asked) {
    case Backend::Math:
      return Backend::Math;
    case Backend::Fused: {
      TORCH_CHECK(options.dropout() == 0.0, fn, ": Backend::Fused does not apply dropout (got dropout = ",
                  options.dropout(), "); use Backend::Math, or put the module in eval mode");
      const char* learned = constant_needing_grad(options);
      TORCH_CHECK(!learned, fn, ": Backend::Fused does not differentiate with respect to ", learned,
                  ", which requires grad; use Backend::Math (or Backend::Auto, which takes it)");
      if (query.is_cpu()) {
        TORCH_CHECK(common::is_fused_kernel_dtype(query.scalar_type()), fn,
                    ": Backend::Fused supports float32, float64, bfloat16 and float16 on the CPU, got ",
                    common::dtype_name(query), "; use Backend::Math");
        return Backend::Fused;
      }
      const ops::FlashKernelSupport support = op_support(query, key, value, options, packed);
      TORCH_CHECK(support.forward, fn, ": Backend::Fused has no kernel for these inputs on ", query.device(), ": ",
                  support.reason, "; use Backend::Auto");
      TORCH_CHECK(support.backward || !needs_grad(query, key, value, options), fn,
                  ": Backend::Fused has no backward for these inputs on ", query.device(), ": ", support.reason,
                  "; use Backend::Auto (it takes Backend::Math when gradients are needed) or torch::NoGradGuard");
      return Backend::Fused;
    }
    case Backend::Torch:
      TORCH_CHECK(!needs_score_terms(options), fn,
                  ": Backend::Torch (LibTorch's SDPA) has no softcap or attention sinks; use Backend::Auto, "
                  "Backend::Fused or Backend::Math");
      return Backend::Torch;
    case Backend::Auto:
      break;
  }
  if (need_weights) return Backend::Math;
  if (query.is_cpu()) {
    const bool fused_ok = common::is_fused_kernel_dtype(query.scalar_type()) && options.dropout() == 0.0 &&
                          !constant_needing_grad(options);
    return fused_ok ? Backend::Fused : Backend::Math;
  }
  // On a GPU: the variants (and packed sequences) go to attn's op where it has a kernel for them, blockwise, in
  // O(T) memory; everything else to LibTorch's SDPA, which picks FlashAttention, cuDNN or memory-efficient
  // kernels itself.
  if (has_variants(options) || packed) {
    const ops::FlashKernelSupport support = op_support(query, key, value, options, packed);
    const bool op_ok = support.forward && options.dropout() == 0.0 && !constant_needing_grad(options) &&
                       (support.backward || !needs_grad(query, key, value, options));
    if (op_ok) return Backend::Fused;
  }
#if TORCH_VERSION_MAJOR >= 2
  return needs_score_terms(options) ? Backend::Math : Backend::Torch;
#else
  return Backend::Math;
#endif
}

std::string route(const char* fn, const torch::Tensor& query, const torch::Tensor& key, const torch::Tensor& value,
                  const SdpaOptions& options, bool need_weights, bool packed) {
  switch (resolve(fn, query, key, value, options, need_weights, packed)) {
    case Backend::Fused:
      return "fused (" + op_support(query, key, value, options, packed).route + ")";
    case Backend::Torch:
      return "torch (" + torch_sdpa_kernel(query, key, value, options) + ")";
    default:
      return "math";
  }
}

std::tuple<torch::Tensor, torch::Tensor> attention(const char* fn, const torch::Tensor& query, const torch::Tensor& key,
                                                   const torch::Tensor& value, const SdpaOptions& options,
                                                   bool need_weights) {
  switch (resolve(fn, query, key, value, options, need_weights)) {
    case Backend::Fused: return {fused_attention(query, key, value, options), torch::Tensor()};
    case Backend::Torch: return {torch_attention(query, key, value, options), torch::Tensor()};
    default: return math_attention(query, key, value, options, need_weights);
  }
}

}  // namespace attn::backends
