#include <attn/modules/multi_head_attention.h>

#include "modules/common/heads.h"
#include "modules/common/settings.h"

namespace attn {
namespace {
constexpr const char* kModule = "attn::MultiHeadAttention";
}

MultiHeadAttentionImpl::MultiHeadAttentionImpl(const MultiHeadAttentionOptions& options_) : options(options_) {
  reset();
}

int64_t MultiHeadAttentionImpl::head_dim() const {
  return options.head_dim() ? *options.head_dim() : options.embed_dim() / options.num_heads();
}

void MultiHeadAttentionImpl::reset() {
  modules::check_positive(kModule, "embed_dim", options.embed_dim());
  modules::check_positive(kModule, "num_heads", options.num_heads());
  modules::check_positive(kModule, "kdim", options.kdim());
  modules::check_positive(kModule, "vdim", options.vdim());
  modules::check_attention_options(kModule, options.attention());
  if (options.head_dim()) {
    modules::check_positive(kModule, "head_dim", *options.head_dim());
  } else {
    TORCH_CHECK(options.embed_dim() % options.num_heads() == 0, kModule, ": embed_dim (", options.embed_dim(),
                ") must be divisible by num_heads (", options.num_heads(), "), or set head_dim explicitly");
  }
  const int64_t inner = modules::checked_width(kModule, "num_heads * head_dim", options.num_heads(), head_dim());
  const auto linear = [&](int64_t in, int64_t out) {
    return torch::nn::Linear(torch::nn::LinearOptions(in, out).bias(options.bias()));
  };
  // Created in this order so that a seeded build draws the same weights as the notebooks' classes.
  q_proj = register_module("q_proj", linear(options.embed_dim(), inner));
  k_proj = register_module("k_proj", linear(options.kdim(), inner));
  v_proj = register_module("v_proj", linear(options.vdim(), inner));
  if (options.output_projection()) {
    out_proj = register_module("out_proj", linear(inner, options.embed_dim()));
  } else {
    out_proj = nullptr;
  }
}

void MultiHeadAttentionImpl::pretty_print(std::ostream& stream) const {
  stream << "attn::MultiHeadAttention(embed_dim=" << options.embed_dim()
         << ", num_heads=" << options.num_heads() << ", head_dim=" << head_dim();
  if (options.kdim() != options.embed_dim() || options.vdim() != options.embed_dim()) {
    stream << ", kdim=" << options.kdim() << ", vdim=" << options.vdim();
  }
  stream << ", bias=" << modules::bool_name(options.bias())
         << ", output_projection=" << modules::bool_name(options.output_projection())
         << modules::describe(options.attention()) << ")";
}

torch::Tensor MultiHeadAttentionImpl::forward(const torch::Tensor& query, const torch::Tensor& key,
                                              const torch::Tensor& value, const AttentionMasks& masks) {
  return std::get<0>(attend(query, key, value, masks, /*need_weights=*/false));
}

std::tuple<torch::Tensor, torch::Tensor> MultiHeadAttentionImpl::forward_with_weights(const torch::Tensor& query,
                                                                                      const torch::Tensor& key,
                                                                                      const torch::Tensor& value,
                                                                                      const AttentionMasks& masks,
                                                                                      HeadWeights head_weights) {
  auto [out, weights] = attend(query, key, value, masks, /*need_weights=*/true);
  return {out, modules::select_head_weights(weights, head_weights)};
}

std::tuple<torch::Tensor, torch::Tensor> MultiHeadAttentionImpl::attend(
    const torch::Tensor& query, const torch::Tensor& key, const torch::Tensor& value, const AttentionMasks& masks,
    bool need_weights) {
  const modules::ModuleLayout layout{kModule,
                                     "query",
                                     "key",
                                     "value",
                                     {options.embed_dim(), options.kdim(), options.vdim(), options.num_heads(),
                                      head_dim(), head_dim()}};
  auto [out, weights] = modules::attend_heads(layout, query, key, value, {*q_proj, *k_proj, *v_proj}, masks,
                                              modules::sdpa_options(options.attention(), is_training()),
                                              need_weights);
  if (out_proj) out = out_proj(out);
  return {out, weights};
}

}  // namespace attn
