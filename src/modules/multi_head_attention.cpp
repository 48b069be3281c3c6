#include <attn/modules/multi_head_attention.h>

#include "backends/linear.h"
#include "common/checks.h"
#include "modules/shared/heads.h"
#include "modules/shared/settings.h"

namespace attn {
namespace {
constexpr const char* kMultiHeadAttention = "attn::MultiHeadAttention";
}

MultiHeadAttentionImpl::MultiHeadAttentionImpl(const MultiHeadAttentionOptions& options_) : options(options_) {
  reset();
}

int64_t MultiHeadAttentionImpl::head_dim() const {
  return options.head_dim() ? *options.head_dim() : options.embed_dim() / options.num_heads();
}

int64_t MultiHeadAttentionImpl::num_kv_heads() const { return options.num_kv_heads().value_or(options.num_heads()); }

void MultiHeadAttentionImpl::reset() {
  modules::check_not_built(*this, kMultiHeadAttention);
  common::check_positive(kMultiHeadAttention, "embed_dim", options.embed_dim());
  common::check_positive(kMultiHeadAttention, "num_heads", options.num_heads());
  common::check_positive(kMultiHeadAttention, "kdim", options.kdim());
  common::check_positive(kMultiHeadAttention, "vdim", options.vdim());
  modules::check_attention_options(kMultiHeadAttention, options.attention());
  if (options.head_dim()) {
    common::check_positive(kMultiHeadAttention, "head_dim", *options.head_dim());
  } else {
    TORCH_CHECK(options.embed_dim() % options.num_heads() == 0, kMultiHeadAttention, ": embed_dim (",
                options.embed_dim(), ") must be divisible by num_heads (", options.num_heads(),
                "), or set head_dim explicitly");
  }
  if (options.num_kv_heads()) {
    common::check_positive(kMultiHeadAttention, "num_kv_heads", *options.num_kv_heads());
    TORCH_CHECK(options.num_heads() % *options.num_kv_heads() == 0, kMultiHeadAttention, ": num_kv_heads (",
                *options.num_kv_heads(), ") must divide num_heads (", options.num_heads(), ")");
  }
  const int64_t inner =
      modules::checked_width(kMultiHeadAttention, "num_heads * head_dim", options.num_heads(), head_dim());
  const int64_t kv_inner =
      modules::checked_width(kMultiHeadAttention, "num_kv_heads * head_dim", num_kv_heads(), head_dim());
  if (options.rotary()) {
    TORCH_CHECK(options.rotary()->rotary_dim() <= head_dim(), kMultiHeadAttention, ": rotary.rotary_dim (",
                options.rotary()->rotary_dim(), ") must be at most head_dim (", head_dim(), ")");
    rotary = RotaryEmbedding(*options.rotary());  // validates the rest of the rotary options
  } else {
    rotary = nullptr;
  }
  const auto projection = [&](const char* name, int64_t in, int64_t out) {
    return modules::register_projection(*this, kMultiHeadAttention, name, in, out, options.bias());
  };
  // Created in this order so that a seeded build draws the same weights as the notebooks' classes.
  q_proj = projection("q_proj", options.embed_dim(), inner);
  k_proj = projection("k_proj", options.kdim(), kv_inner);
  v_proj = projection("v_proj", options.vdim(), kv_inner);
  if (options.output_projection()) {
    out_proj = projection("out_proj", inner, options.embed_dim());
  } else {
    out_proj = nullptr;
  }
  sinks = modules::register_sinks(*this, options.sinks(), options.num_heads());
  built_heads_ = options.num_heads();
  built_kv_heads_ = num_kv_heads();
}

modules::ScoreTerms MultiHeadAttentionImpl::score_terms() const {
  return {options.alibi(), options.num_heads(), sinks, q_proj->weight.options()};
}

void MultiHeadAttentionImpl::pretty_print(std::ostream& stream) const {
  stream << "attn::MultiHeadAttention(embed_dim=" << options.embed_dim()
         << ", num_heads=" << options.num_heads() << ", head_dim=" << head_dim();
  if (num_kv_heads() != options.num_heads()) stream << ", num_kv_heads=" << num_kv_heads();
  if (rotary) {
    stream << ", rotary=";
    rotary->pretty_print(stream);
  }
  if (options.kdim() != options.embed_dim() || options.vdim() != options.embed_dim()) {
    stream << ", kdim=" << options.kdim() << ", vdim=" << options.vdim();
  }
  stream << ", bias=" << modules::bool_name(options.bias())
         << ", output_projection=" << modules::bool_name(options.output_projection())
         << modules::describe(score_terms()) << modules::describe(options.attention()) << ")";
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

modules::ModuleLayout MultiHeadAttentionImpl::layout() const {
  modules::check_built_with(kMultiHeadAttention, {{"num_heads", built_heads_, options.num_heads()},
                                                  {"num_kv_heads", built_kv_heads_, num_kv_heads()}});
  return {kMultiHeadAttention,
          "query",
          "key",
          "value",
          {options.embed_dim(), options.kdim(), options.vdim(), options.num_heads(), head_dim(), head_dim(),
           num_kv_heads()}};
}

std::tuple<torch::Tensor, torch::Tensor> MultiHeadAttentionImpl::attend(
    const torch::Tensor& query, const torch::Tensor& key, const torch::Tensor& value, const AttentionMasks& masks,
    bool need_weights) {
  auto [out, weights] = modules::attend_heads(layout(), query, key, value, {*q_proj, *k_proj, *v_proj}, masks,
                                              modules::sdpa_options(options.attention(), is_training(), score_terms()),
                                              need_weights, rotary.is_empty() ? nullptr : rotary.get());
  if (out_proj) out = backends::project_rows(out, out_proj->weight, out_proj->bias);
  return {out, weights};
}

torch::Tensor MultiHeadAttentionImpl::forward_with_cache(const torch::Tensor& x, KVCache& cache, int64_t layer,
                                                         const std::vector<int64_t>& new_lengths) {
  check_self_attention("forward_with_cache");
  const SdpaOptions sdpa = modules::sdpa_options(options.attention(), is_training(), score_terms());
  torch::Tensor out = modules::attend_with_cache(layout(), x, {*q_proj, *k_proj, *v_proj}, cache, layer, new_lengths,
                                                 sdpa, rotary.is_empty() ? nullptr : rotary.get(), this);
  if (out_proj) out = backends::project_rows(out, out_proj->weight, out_proj->bias);
  return modules::zero_padding_rows(out, new_lengths);
}

torch::Tensor MultiHeadAttentionImpl::forward_with_cache(const torch::Tensor& x, PagedKVCache& cache, int64_t layer,
                                                         const std::vector<int64_t>& sequences) {
  check_self_attention("forward_with_cache");
  const SdpaOptions sdpa = modules::sdpa_options(options.attention(), is_training(), score_terms());
  torch::Tensor out = modules::attend_with_paged_cache(layout(), x, {*q_proj, *k_proj, *v_proj}, cache, layer,
                                                       sequences, sdpa, rotary.is_empty() ? nullptr : rotary.get(),
                                                       this);
  return out_proj ? backends::project_rows(out, out_proj->weight, out_proj->bias) : out;
}

torch::Tensor MultiHeadAttentionImpl::forward_with_tree(const torch::Tensor& x, KVCache& cache, int64_t layer,
                                                        const TokenTree& tree) {
  check_self_attention("forward_with_tree");
  const SdpaOptions sdpa = modules::sdpa_options(options.attention(), is_training(), score_terms());
  torch::Tensor out = modules::attend_with_tree(layout(), x, {*q_proj, *k_proj, *v_proj}, cache, layer, tree, sdpa,
                                                rotary.is_empty() ? nullptr : rotary.get(), this);
  return out_proj ? backends::project_rows(out, out_proj->weight, out_proj->bias) : out;
}

void MultiHeadAttentionImpl::check_self_attention(const char* method) const {
  TORCH_CHECK(options.kdim() == options.embed_dim() && options.vdim() == options.embed_dim(), kMultiHeadAttention,
              "::", method, ": a call on a KV cache is self-attention, which needs kdim == vdim == embed_dim (got kdim ",
              options.kdim(), ", vdim ", options.vdim(), ", embed_dim ", options.embed_dim(), ")");
}

KVCacheOptions MultiHeadAttentionImpl::cache_options(int64_t num_layers, int64_t batch, int64_t capacity) const {
  const modules::ProjectionWidths& w = layout().widths;
  const torch::Tensor& weight = k_proj->weight;
  return KVCacheOptions(num_layers, batch, w.kv_heads(), w.head_dim_qk, capacity)
      .value_dim(w.head_dim_v)
      .dtype(weight.scalar_type())
      .device(weight.device());
}

PagedKVCacheOptions MultiHeadAttentionImpl::paged_cache_options(int64_t num_layers, int64_t num_blocks,
                                                                int64_t block_size) const {
  const modules::ProjectionWidths& w = layout().widths;
  return PagedKVCacheOptions(num_layers, w.kv_heads(), w.head_dim_qk, num_blocks, block_size)
      .value_dim(w.head_dim_v)
      .dtype(k_proj->weight.scalar_type());
}

ProjectedMemory MultiHeadAttentionImpl::project_memory(const torch::Tensor& key, const torch::Tensor& value) const {
  const modules::Heads heads = modules::project_memory(layout(), key, value, {*q_proj, *k_proj, *v_proj},
                                                       rotary.is_empty() ? nullptr : rotary.get());
  return {heads.k, heads.v};
}

torch::Tensor MultiHeadAttentionImpl::forward_with_memory(const torch::Tensor& query, const ProjectedMemory& memory,
                                                          const AttentionMasks& masks) {
  const SdpaOptions sdpa = modules::sdpa_options(options.attention(), is_training(), score_terms());
  torch::Tensor out = std::get<0>(modules::attend_memory(layout(), query, memory.key, memory.value,
                                                         {*q_proj, *k_proj, *v_proj}, masks, sdpa,
                                                         /*need_weights=*/false,
                                                         rotary.is_empty() ? nullptr : rotary.get()));
  return out_proj ? backends::project_rows(out, out_proj->weight, out_proj->bias) : out;
}

}  // namespace attn
