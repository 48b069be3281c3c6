// Backend choice: validated once, decided once, then one call into the chosen implementation.

#include "backends/dispatch.h"

#include "backends/implementations.h"
#include "backends/masks.h"
#include "common/checks.h"

#include <torch/version.h>

namespace attn::backends {
namespace {

bool additive_needs_grad(const SdpaOptions& options) {
  const torch::Tensor& add = options.masks().additive_mask();
  return add.defined() && add.requires_grad() && at::GradMode::is_enabled();
}

}  // namespace

Backend resolve(const char* fn, const torch::Tensor& query, const SdpaOptions& options, bool need_weights) {
  const Backend asked = options.backend();
  if (asked != Backend::Math && asked != Backend::Auto) {
    TORCH_CHECK(!need_weights, fn, ": Backend::", to_string(asked),
                " does not return attention weights; use Backend::Math or Backend::Auto");
  }
  switch (asked) {
    case Backend::Math:
      return Backend::Math;
    case Backend::Fused:
      TORCH_CHECK(query.is_cpu(), fn, ": Backend::Fused runs on the CPU, but the inputs are on ", query.device(),
                  "; use Backend::Auto or Backend::Torch");
      TORCH_CHECK(common::is_fused_kernel_dtype(query.scalar_type()), fn, ": Backend::Fused supports float32, float64 and bfloat16, got ",
                  common::dtype_name(query), "; use Backend::Math");
      TORCH_CHECK(options.dropout() == 0.0, fn, ": Backend::Fused does not apply dropout (got dropout = ",
                  options.dropout(), "); use Backend::Math, or put the module in eval mode");
      TORCH_CHECK(!additive_needs_grad(options), fn,
                  ": Backend::Fused does not differentiate with respect to additive_mask, which requires grad; "
                  "use Backend::Math");
      return Backend::Fused;
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
    const bool fused_ok = common::is_fused_kernel_dtype(query.scalar_type()) && options.dropout() == 0.0 && !additive_needs_grad(options);
    return fused_ok ? Backend::Fused : Backend::Math;
  }
#if TORCH_VERSION_MAJOR >= 2
  return needs_score_terms(options) ? Backend::Math : Backend::Torch;
#else
  return Backend::Math;
#endif
}

std::tuple<torch::Tensor, torch::Tensor> attention(const char* fn, const torch::Tensor& query, const torch::Tensor& key,
                                                   const torch::Tensor& value, const SdpaOptions& options,
                                                   bool need_weights) {
  switch (resolve(fn, query, options, need_weights)) {
    case Backend::Fused: return {fused_attention(query, key, value, options), torch::Tensor()};
    case Backend::Torch: return {torch_attention(query, key, value, options), torch::Tensor()};
    default: return math_attention(query, key, value, options, need_weights);
  }
}

}  // namespace attn::backends
