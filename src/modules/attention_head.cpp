#include <attn/modules/attention_head.h>

#include "common/checks.h"
#include "modules/shared/heads.h"
#include "modules/shared/settings.h"

namespace attn {
namespace {
constexpr const char* kAttentionHead = "attn::AttentionHead";
}

AttentionHeadImpl::AttentionHeadImpl(const AttentionHeadOptions& options_) : options(options_) { reset(); }

void AttentionHeadImpl::reset() {
  modules::check_not_built(*this, kAttentionHead);
  common::check_positive(kAttentionHead, "d_in", options.d_in());
  common::check_positive(kAttentionHead, "d_k", options.d_k());
  common::check_positive(kAttentionHead, "d_v", options.d_v());
  modules::check_attention_options(kAttentionHead, options.attention());
  const auto projection = [&](const char* name, int64_t out) {
    return modules::register_projection(*this, kAttentionHead, name, options.d_in(), out, options.bias());
  };
  // Created in this order so that a seeded build draws the same weights as the notebooks' classes.
  q_proj = projection("q_proj", options.d_k());
  k_proj = projection("k_proj", options.d_k());
  v_proj = projection("v_proj", options.d_v());
}

void AttentionHeadImpl::pretty_print(std::ostream& stream) const {
  stream << "attn::AttentionHead(d_in=" << options.d_in() << ", d_k=" << options.d_k() << ", d_v=" << options.d_v()
         << ", bias=" << modules::bool_name(options.bias()) << modules::describe(options.attention()) << ")";
}

torch::Tensor AttentionHeadImpl::forward(const torch::Tensor& x) {
  return std::get<0>(attend(x, x, x, {}, /*need_weights=*/false, /*one_input=*/true));
}

torch::Tensor AttentionHeadImpl::forward(const torch::Tensor& q_in, const torch::Tensor& k_in,
                                         const torch::Tensor& v_in, const AttentionMasks& masks) {
  return std::get<0>(attend(q_in, k_in, v_in, masks, /*need_weights=*/false));
}

std::tuple<torch::Tensor, torch::Tensor> AttentionHeadImpl::forward_with_weights(const torch::Tensor& q_in,
                                                                                 const torch::Tensor& k_in,
                                                                                 const torch::Tensor& v_in,
                                                                                 const AttentionMasks& masks) {
  auto [out, weights] = attend(q_in, k_in, v_in, masks, /*need_weights=*/true);
  return {out, weights.squeeze(-3)};  // a single head: drop the head dimension
}

std::tuple<torch::Tensor, torch::Tensor> AttentionHeadImpl::attend(const torch::Tensor& q_in,
                                                                   const torch::Tensor& k_in,
                                                                   const torch::Tensor& v_in,
                                                                   const AttentionMasks& masks, bool need_weights,
                                                                   bool one_input) {
  const modules::ModuleLayout named{
      kAttentionHead, "q_in", "k_in", "v_in",
      {options.d_in(), options.d_in(), options.d_in(), /*num_heads=*/1, options.d_k(), options.d_v()}};
  const modules::ModuleLayout layout = one_input ? modules::one_input(named) : named;
  return modules::attend_heads(layout, q_in, k_in, v_in, {*q_proj, *k_proj, *v_proj}, masks,
                               modules::sdpa_options(options.attention(), is_training(), {}), need_weights);
}

}  // namespace attn
