// The public functions of the functional core: validate once at the front door, then dispatch once.

#include <attn/functional.h>

#include "backends/cache.h"
#include "backends/dispatch.h"
#include "backends/linear.h"
#include "backends/validate.h"
#include "backends/varlen_attention.h"
#include "common/alibi_slopes.h"
#include "common/checks.h"
#include "int8_rows.h"

#include <string>

namespace attn {
namespace {
constexpr const char* kSdpa = "attn::scaled_dot_product_attention";
constexpr const char* kSdpaWithWeights = "attn::scaled_dot_product_attention_with_weights";
constexpr const char* kWithCache = "attn::attention_with_kv_cache";
constexpr const char* kVarlen = "attn::varlen_attention";

/// The query a cache object reads, checked against the cache: where they differ the query is what the caller
/// passed wrong, not the cache's tensors, which the caller never named. `rows` is the cache's batch, or the
/// sequences of a paged batch.
void check_query_for_cache(const torch::Tensor& query, int64_t rows, const char* rows_are, int64_t kv_heads,
                           int64_t head_dim) {
  TORCH_CHECK(query.defined() && query.dim() == 4 && query.size(0) == rows && query.size(1) > 0 &&
                  query.size(1) % kv_heads == 0 && query.size(3) == head_dim,
              kWithCache, ": query must be [B, H, Tq, d_k] = [", rows, ", H, Tq, ", head_dim, "] (", rows_are,
              ", the cache's head_dim) with H a multiple of the cache's ", kv_heads, " key/value heads, got ",
              query.defined() ? query.sizes() : at::IntArrayRef{});
}
}  // namespace

torch::Tensor scaled_dot_product_attention(const torch::Tensor& query, const torch::Tensor& key,
                                           const torch::Tensor& value, const SdpaOptions& options) {
  backends::check_sdpa_inputs(kSdpa, query, key, value, options);
  return std::get<0>(backends::attention(kSdpa, query, key, value, options, /*need_weights=*/false));
}

std::tuple<torch::Tensor, torch::Tensor> scaled_dot_product_attention_with_weights(const torch::Tensor& query,
                                                                                   const torch::Tensor& key,
                                                                                   const torch::Tensor& value,
                                                                                   const SdpaOptions& options) {
  backends::check_sdpa_inputs(kSdpaWithWeights, query, key, value, options);
  return backends::attention(kSdpaWithWeights, query, key, value, options, /*need_weights=*/true);
}

torch::Tensor attention_with_kv_cache(const torch::Tensor& query, const torch::Tensor& key_cache,
                                      const torch::Tensor& value_cache, const torch::Tensor& query_starts,
                                      const torch::Tensor& key_lengths, const SdpaOptions& options) {
  backends::check_cache_inputs(kWithCache, query, key_cache, value_cache, query_starts, key_lengths, options);
  return backends::cache_attention(kWithCache, query, key_cache, value_cache, query_starts, key_lengths, options);
}

torch::Tensor attention_with_kv_cache(const torch::Tensor& query, const KVCache& cache, int64_t layer,
                                      const torch::Tensor& query_starts, const SdpaOptions& options) {
  common::check_layer_index(kWithCache, layer, cache.num_layers());
  const KVCacheOptions& c = cache.options();
  check_query_for_cache(query, c.batch(), "the cache's batch", c.num_kv_heads(), c.head_dim());
  const torch::Tensor &keys = cache.keys(layer), &values = cache.values(layer), &lengths = cache.lengths(layer);
  ops::DecodeOnlyInputs decode_only;
  decode_only.key_scales = cache.key_scales(layer), decode_only.value_scales = cache.value_scales(layer);
  backends::check_cache_inputs(kWithCache, query, keys, values, query_starts, lengths, options, decode_only);
  return attend_stored_rows(kWithCache, query, keys, values, query_starts, lengths, options, decode_only);
}

torch::Tensor attention_with_kv_cache(const torch::Tensor& query, const PagedKVCache& cache, const PagedBatch& batch,
                                      const torch::Tensor& query_starts, const SdpaOptions& options) {
  TORCH_CHECK(batch.cache_id == cache.id(), kWithCache,
              ": the PagedBatch was made by another PagedKVCache (its block tables name that cache's blocks)");
  TORCH_CHECK(batch.version == cache.version(), kWithCache,
              ": the PagedBatch is stale: the cache changed (append, fork or release) after PagedKVCache::batch made "
              "it, so its block tables may name blocks that now hold other positions; make a new one");
  const int64_t layer = batch.layer;
  TORCH_CHECK(layer >= 0 && layer < cache.num_layers(), kWithCache, ": the PagedBatch's layer must be in [0, ",
              cache.num_layers(), "), got ", layer);
  check_query_for_cache(query, static_cast<int64_t>(batch.sequences.size()), "the PagedBatch's sequences",
                        cache.options().num_kv_heads(), cache.options().head_dim());
  ops::DecodeOnlyInputs decode_only;
  decode_only.key_scales = cache.key_scales(layer), decode_only.value_scales = cache.value_scales(layer);
  decode_only.block_table = batch.block_table;
  const torch::Tensor &keys = cache.key_blocks(layer), &values = cache.value_blocks(layer);
  backends::check_cache_inputs(kWithCache, query, keys, values, query_starts, batch.lengths, options, decode_only);
  return attend_stored_rows(kWithCache, query, keys, values, query_starts, batch.lengths, options, decode_only);
}

torch::Tensor attention_over_token_tree(const torch::Tensor& query, const KVCache& cache, int64_t layer,
                                        const TokenTree& tree, const SdpaOptions& options) {
  constexpr const char* fn = "attn::attention_over_token_tree";
  common::check_layer_index(fn, layer, cache.num_layers());
  TORCH_CHECK(query.defined() && query.dim() == 4 && query.size(2) == tree.size(), fn,
              ": query must be [B, H, N, d_k] with N = ", tree.size(), " candidates, got ",
              query.defined() ? query.sizes() : at::IntArrayRef{});
  const torch::Tensor& lengths = cache.lengths(layer);
  const int64_t* length = lengths.data_ptr<int64_t>();
  for (int64_t b = 0; b < lengths.size(0); ++b) {
    TORCH_CHECK(length[b] >= tree.size(), fn, ": row ", b, " holds ", length[b], " positions, fewer than the ",
                tree.size(), " candidates it should end with");
  }
  ops::DecodeOnlyInputs decode_only;
  decode_only.key_scales = cache.key_scales(layer), decode_only.value_scales = cache.value_scales(layer);
  decode_only.tree_mask = tree.ancestor_mask();
  const torch::Tensor starts = lengths - tree.size();
  const torch::Tensor &keys = cache.keys(layer), &values = cache.values(layer);
  backends::check_cache_inputs(fn, query, keys, values, starts, lengths, options, decode_only);
  return attend_stored_rows(fn, query, keys, values, starts, lengths, options, decode_only);
}

torch::Tensor varlen_attention(const torch::Tensor& query, const torch::Tensor& key, const torch::Tensor& value,
                               const torch::Tensor& cu_seqlens_q, const torch::Tensor& cu_seqlens_k,
                               int64_t max_seqlen_q, int64_t max_seqlen_k, const SdpaOptions& options) {
  backends::check_varlen_inputs(kVarlen, query, key, value, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                                options);
  return backends::varlen_attention(kVarlen, query, key, value, cu_seqlens_q, cu_seqlens_k, options);
}

namespace {

/// A linear layer's shapes: weight [out, in], input [..., in], bias [out] or undefined; the messages name them.
void check_linear_weight(const char* fn, const torch::Tensor& input, const torch::Tensor& weight,
                         const std::string& weight_name, const torch::Tensor& bias, const std::string& bias_name) {
  TORCH_CHECK(weight.dim() == 2, fn, ": ", weight_name, " must be [out_features, in_features], got ", weight.sizes());
  TORCH_CHECK(input.dim() >= 1 && input.size(-1) == weight.size(1), fn, ": input must be [..., in_features] = [..., ",
              weight.size(1), "] to match ", weight_name, " ", weight.sizes(), ", got ", input.sizes());
  TORCH_CHECK(!bias.defined() || (bias.dim() == 1 && bias.size(0) == weight.size(0)), fn, ": ", bias_name,
              " must be [out_features] = [", weight.size(0), "], got ", bias.sizes());
  common::check_same_device_dtype(fn, weight_name.c_str(), weight, "input", input);
  if (bias.defined()) common::check_same_device_dtype(fn, bias_name.c_str(), bias, "input", input);
}

}  // namespace

torch::Tensor linear(const torch::Tensor& input, const torch::Tensor& weight, const torch::Tensor& bias) {
  constexpr const char* fn = "attn::linear";
  TORCH_CHECK(input.defined() && weight.defined(), fn, ": input and weight must be defined tensors");
  check_linear_weight(fn, input, weight, "weight", bias, "bias");
  return backends::project_rows(input, weight, bias);
}

std::vector<torch::Tensor> linear_many(const torch::Tensor& input, const std::vector<torch::Tensor>& weights,
                                       const std::vector<torch::Tensor>& biases) {
  constexpr const char* fn = "attn::linear_many";
  TORCH_CHECK(input.defined(), fn, ": input must be a defined tensor");
  TORCH_CHECK(!weights.empty(), fn, ": weights must hold at least one weight");
  TORCH_CHECK(biases.empty() || biases.size() == weights.size(), fn,
              ": biases must be empty or hold one entry (a tensor, or an undefined one for none) per weight: ",
              weights.size(), ", got ", biases.size());
  for (size_t k = 0; k < weights.size(); ++k) {
    const torch::Tensor& weight = weights[k];
    const torch::Tensor bias = biases.empty() ? torch::Tensor() : biases[k];
    TORCH_CHECK(weight.defined(), fn, ": weights[", k, "] must be a defined tensor");
    // c10::str, not operator+ on std::string: GCC 12 warns falsely (-Wstringop-overflow) on the latter here.
    check_linear_weight(fn, input, weight, c10::str("weights[", k, "]"), bias, c10::str("biases[", k, "]"));
  }
  return backends::project_rows_many(input, weights,
                                     biases.empty() ? std::vector<torch::Tensor>(weights.size()) : biases);
}

torch::Tensor alibi_slopes(int64_t num_heads) {
  return common::standard_alibi_slopes("attn::alibi_slopes", num_heads, torch::kCPU).to(torch::kFloat32);
}

Backend resolved_backend(const torch::Tensor& query, const SdpaOptions& options, bool need_weights) {
  TORCH_CHECK(query.defined(), "attn::resolved_backend: query is undefined");
  return backends::resolve(need_weights ? kSdpaWithWeights : kSdpa, query, query, query, options, need_weights);
}

Backend resolved_backend(const torch::Tensor& query, const torch::Tensor& key, const torch::Tensor& value,
                         const SdpaOptions& options, bool need_weights) {
  const char* fn = need_weights ? kSdpaWithWeights : kSdpa;
  backends::check_sdpa_inputs(fn, query, key, value, options);
  return backends::resolve(fn, query, key, value, options, need_weights);
}

std::string describe_route(const torch::Tensor& query, const torch::Tensor& key, const torch::Tensor& value,
                           const SdpaOptions& options, bool need_weights) {
  const char* fn = need_weights ? kSdpaWithWeights : kSdpa;
  backends::check_sdpa_inputs(fn, query, key, value, options);
  return backends::route(fn, query, key, value, options, need_weights);
}

std::string describe_varlen_route(const torch::Tensor& query, const torch::Tensor& key, const torch::Tensor& value,
                                  const torch::Tensor& cu_seqlens_q, const torch::Tensor& cu_seqlens_k,
                                  int64_t max_seqlen_q, int64_t max_seqlen_k, const SdpaOptions& options) {
  backends::check_varlen_inputs(kVarlen, query, key, value, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                                options);
  return backends::varlen_route(kVarlen, query, key, value, cu_seqlens_q, cu_seqlens_k, options);
}

std::string describe_route_with_kv_cache(const torch::Tensor& query, const torch::Tensor& key_cache,
                                         const torch::Tensor& value_cache, const torch::Tensor& query_starts,
                                         const torch::Tensor& key_lengths, const SdpaOptions& options) {
  backends::check_cache_inputs(kWithCache, query, key_cache, value_cache, query_starts, key_lengths, options);
  return backends::cache_route(kWithCache, query, key_cache, value_cache, query_starts, key_lengths, options);
}

}  // namespace attn
