#include <attn/modules/cross_attention.h>

#include "common/checks.h"
#include "modules/shared/heads.h"
#include "modules/shared/settings.h"

namespace attn {
namespace {
constexpr const char* kCrossAttention = "attn::CrossAttention";
}

CrossAttentionImpl::CrossAttentionImpl(const CrossAttentionOptions& options_) : options(options_) { reset(); }

void CrossAttentionImpl::reset() {
  modules::check_not_built(*this, kCrossAttention);
  common::check_positive(kCrossAttention, "d_query_in", options.d_query_in());
  common::check_positive(kCrossAttention, "d_context_in", options.d_context_in());
  common::check_positive(kCrossAttention, "d_k", options.d_k());
  common::check_positive(kCrossAttention, "d_v", options.d_v());
  common::check_positive(kCrossAttention, "num_heads", options.num_heads());
  modules::check_attention_options(kCrossAttention, options.attention());
  const int64_t heads = options.num_heads();
  const auto projection = [&](const char* name, int64_t in, int64_t out) {
    return modules::register_projection(*this, kCrossAttention, name, in, out, options.bias());
  };
  const int64_t qk_width = modules::checked_width(kCrossAttention, "num_heads * d_k", heads, options.d_k());
  const int64_t v_width = modules::checked_width(kCrossAttention, "num_heads * d_v", heads, options.d_v());
  q_proj = projection("q_proj", options.d_query_in(), qk_width);
  k_proj = projection("k_proj", options.d_context_in(), qk_width);
  v_proj = projection("v_proj", options.d_context_in(), v_width);
  sinks = modules::register_sinks(*this, options.sinks(), heads);
  built_heads_ = heads;
}

modules::ScoreTerms CrossAttentionImpl::score_terms() const {
  return {options.alibi(), options.num_heads(), sinks, q_proj->weight.options()};
}

void CrossAttentionImpl::pretty_print(std::ostream& stream) const {
  stream << "attn::CrossAttention(d_query_in=" << options.d_query_in()
         << ", d_context_in=" << options.d_context_in() << ", d_k=" << options.d_k() << ", d_v=" << options.d_v()
         << ", num_heads=" << options.num_heads() << ", bias=" << modules::bool_name(options.bias())
         << modules::describe(score_terms()) << modules::describe(options.attention()) << ")";
}

torch::Tensor CrossAttentionImpl::forward(const torch::Tensor& x, const torch::Tensor& context,
                                          const AttentionMasks& masks) {
  return std::get<0>(attend(x, context, masks, /*need_weights=*/false));
}

std::tuple<torch::Tensor, torch::Tensor> CrossAttentionImpl::forward_with_weights(const torch::Tensor& x,
                                                                                  const torch::Tensor& context,
                                                                                  const AttentionMasks& masks,
                                                                                  HeadWeights head_weights) {
  auto [out, weights] = attend(x, context, masks, /*need_weights=*/true);
  return {out, modules::select_head_weights(weights, head_weights)};
}

namespace {
modules::ModuleLayout layout_of(const CrossAttentionOptions& o, int64_t built_heads) {
  modules::check_built_with(kCrossAttention, {{"num_heads", built_heads, o.num_heads()}});
  return {kCrossAttention, "x", "context", "context",
          {o.d_query_in(), o.d_context_in(), o.d_context_in(), o.num_heads(), o.d_k(), o.d_v()}};
}
}  // namespace

std::tuple<torch::Tensor, torch::Tensor> CrossAttentionImpl::attend(const torch::Tensor& x,
                                                                    const torch::Tensor& context,
                                                                    const AttentionMasks& masks, bool need_weights) {
  return modules::attend_heads(layout_of(options, built_heads_), x, context, context, {*q_proj, *k_proj, *v_proj},
                               masks, modules::sdpa_options(options.attention(), is_training(), score_terms()),
                               need_weights);
}

ProjectedMemory CrossAttentionImpl::project_memory(const torch::Tensor& context) const {
  const modules::Heads heads = modules::project_memory(layout_of(options, built_heads_), context, context,
                                                       {*q_proj, *k_proj, *v_proj}, /*rotary=*/nullptr);
  return {heads.k, heads.v};
}

torch::Tensor CrossAttentionImpl::forward_with_memory(const torch::Tensor& x, const ProjectedMemory& memory,
                                                      const AttentionMasks& masks) {
  return std::get<0>(modules::attend_memory(layout_of(options, built_heads_), x, memory.key, memory.value,
                                            {*q_proj, *k_proj, *v_proj}, masks,
                                            modules::sdpa_options(options.attention(), is_training(), score_terms()),
                                            /*need_weights=*/false, /*rotary=*/nullptr));
}

}  // namespace attn
