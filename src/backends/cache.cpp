#include "backends/cache.h"

#include "backends/dispatch.h"
#include "backends/masks.h"
#include "backends/op_arguments.h"
#include "backends/validate.h"
#include "common/checks.h"
#include "common/dtypes.h"

#include <attn/ops/decode_attention.h>

#include <ATen/ATen.h>

#include <algorithm>
#include <string>
#include <vector>

namespace attn::backends {

void check_cache_inputs(const char* fn, const torch::Tensor& query, const torch::Tensor& key_cache,
                        const torch::Tensor& value_cache, const torch::Tensor& query_starts,
                        const torch::Tensor& key_lengths, const SdpaOptions& options) {
  TORCH_CHECK(query.defined() && key_cache.defined() && value_cache.defined(), fn,
              ": query, key_cache and value_cache must be defined");
  TORCH_CHECK(query.dim() == 4, fn, ": query must be [B, H, Tq, d_k], got shape ", query.sizes());
  TORCH_CHECK(key_cache.dim() == 4, fn, ": key_cache must be [B, H_kv, capacity, d_k], got shape ", key_cache.sizes());
  TORCH_CHECK(value_cache.dim() == 4, fn, ": value_cache must be [B, H_kv, capacity, d_v], got shape ",
              value_cache.sizes());
  common::check_floating(fn, "query", query);
  common::check_same_device_dtype(fn, "key_cache", key_cache, "query", query);
  common::check_same_device_dtype(fn, "value_cache", value_cache, "query", query);
  const int64_t B = query.size(0), H = query.size(1), H_kv = key_cache.size(1), capacity = key_cache.size(2);
  TORCH_CHECK(key_cache.size(0) == B && H_kv > 0 && H % H_kv == 0 && key_cache.size(3) == query.size(3), fn,
              ": key_cache must be [B, H_kv, capacity, d_k] = [", B, ", H_kv, capacity, ", query.size(3),
              "] with H_kv dividing the query's ", H, " heads, got key_cache ", key_cache.sizes(), " for query ",
              query.sizes());
  TORCH_CHECK(value_cache.size(0) == B && value_cache.size(1) == H_kv && value_cache.size(2) == capacity, fn,
              ": value_cache must be [B, H_kv, capacity, d_v] = [", B, ", ", H_kv, ", ", capacity,
              ", d_v] to match key_cache, got value_cache ", value_cache.sizes());
  TORCH_CHECK(query.size(3) > 0, fn, ": d_k (query's last dimension) must be positive, got query ", query.sizes());
  for (const auto& [arg, t] : {std::pair<const char*, const torch::Tensor&>{"query_starts", query_starts},
                               std::pair<const char*, const torch::Tensor&>{"key_lengths", key_lengths}}) {
    TORCH_CHECK(t.defined() && t.dim() == 1 && t.size(0) == B, fn, ": ", arg, " must be [B] = [", B, "], got ",
                t.defined() ? t.sizes() : at::IntArrayRef{});
    TORCH_CHECK(at::isIntegralType(t.scalar_type(), /*includeBool=*/false), fn, ": ", arg,
                " must hold integers, got ", common::dtype_name(t));
  }
  const std::vector<int64_t> starts = host_values(query_starts), lengths = host_values(key_lengths);
  for (int64_t b = 0; b < B; ++b) {
    TORCH_CHECK(lengths[b] >= 0 && lengths[b] <= capacity, fn, ": key_lengths[", b, "] = ", lengths[b],
                " must be in [0, capacity = ", capacity, "]");
    TORCH_CHECK(starts[b] >= 0, fn, ": query_starts[", b, "] = ", starts[b], " must be >= 0");
  }
  check_score_options(fn, query, options, query.size(1), B);
  TORCH_CHECK(options.masks().empty(), fn,
              ": takes no masks: query_starts and key_lengths say which keys each query sees (use "
              "attn::scaled_dot_product_attention on the cache's keys for other masks)");
  if (options.scale()) TORCH_CHECK(std::isfinite(*options.scale()), fn, ": scale must be finite, got ", *options.scale());
  TORCH_CHECK(options.dropout() >= 0.0 && options.dropout() <= 1.0, fn, ": dropout must be in [0, 1], got ",
              options.dropout());
}

namespace {

/// Whether every row holds as many keys and its queries are the newest positions: the cache rule is then plain
/// bottom-right causality on the used prefix.
bool uniform_rows(const std::vector<int64_t>& starts, const std::vector<int64_t>& lengths, int64_t tq) {
  const int64_t used = *std::max_element(lengths.begin(), lengths.end());
  return std::all_of(lengths.begin(), lengths.end(), [&](int64_t l) { return l == used; }) &&
         std::all_of(starts.begin(), starts.end(), [&](int64_t s) { return s + tq == used; });
}

}  // namespace

bool uses_decode_kernel(const torch::Tensor& query, const torch::Tensor& key_cache, const torch::Tensor& value_cache,
                        const SdpaOptions& options) {
  const bool sinks_need_grad = options.sinks().defined() && options.sinks().requires_grad();
  const bool needs_grad = at::GradMode::is_enabled() && (query.requires_grad() || key_cache.requires_grad() ||
                                                         value_cache.requires_grad() || sinks_need_grad);
  const bool backend_ok = options.backend() == Backend::Auto || options.backend() == Backend::Fused;
  if (!backend_ok || options.dropout() != 0.0 || query.size(2) > kDecodeMaxQueries || needs_grad ||
      !ops::decode_attention_support(query, key_cache, value_cache).supported) {
    return false;
  }
  // On a GPU, LibTorch's kernels read the cache faster than attn's decode kernel, rows of one length (2.3x, at
  // 77-104% of a 4 GiB read against 34-44%) and ragged rows with their mask (2x) alike (bench/RESULTS.md, issue
  // 36): Backend::Auto takes the general backends there, and Backend::Fused the decode kernel.
  return !(query.is_cuda() && options.backend() == Backend::Auto);
}

namespace {

/// The general backends' form of a cache call: the used prefix of the caches (views) and the options with the
/// cache rule as a mask, or as plain bottom-right causality when every row has the same length and its queries
/// are the newest positions.
struct GeneralCall {
  torch::Tensor key, value;
  SdpaOptions options;
};

GeneralCall general_call(const torch::Tensor& query, const torch::Tensor& key_cache, const torch::Tensor& value_cache,
                         const torch::Tensor& query_starts, const torch::Tensor& key_lengths,
                         const SdpaOptions& options) {
  const std::vector<int64_t> starts = host_values(query_starts), lengths = host_values(key_lengths);
  const int64_t tq = query.size(2);
  const int64_t used = *std::max_element(lengths.begin(), lengths.end());
  GeneralCall call{key_cache.narrow(2, 0, used), value_cache.narrow(2, 0, used), options};
  if (uniform_rows(starts, lengths, tq)) {
    call.options.causal_alignment(CausalAlignment::BottomRight);
    // One query at the newest position sees every key: causality is no mask at all, which keeps LibTorch on
    // its fastest (split-KV) kernels.
    if (tq == 1 && !options.attention().has_window()) call.options.causal(false);
    return call;
  }
  const auto on_device = [&](const torch::Tensor& t) { return t.to(query.device(), torch::kLong); };
  const torch::Tensor blocked =
      cache_blocked(on_device(query_starts), on_device(key_lengths), tq, used, options.attention());
  AttentionMasks masks = AttentionMasks().attend_mask(blocked.logical_not());
  if (options.alibi_slopes().defined()) {
    masks.additive_mask(cache_alibi_bias(options.alibi_slopes(), on_device(query_starts), tq, used, query.scalar_type()));
    call.options.alibi_slopes({});
  }
  call.options.causal(false).window(-1, -1).masks(masks);
  return call;
}

}  // namespace

torch::Tensor cache_attention(const char* fn, const torch::Tensor& query, const torch::Tensor& key_cache,
                              const torch::Tensor& value_cache, const torch::Tensor& query_starts,
                              const torch::Tensor& key_lengths, const SdpaOptions& options) {
  if (uses_decode_kernel(query, key_cache, value_cache, options)) {
    // The op reads the positions as int64 on the CPU (the CUDA kernel too, to size its grid); tensors already
    // so pass through without a copy.
    const auto host = [](const torch::Tensor& t) { return t.to(torch::kCPU, torch::kLong); };
    return ops::decode_attention(query, key_cache, value_cache, host(query_starts), host(key_lengths),
                                 options.causal(), optional_scale(options), options.window_left(),
                                 options.window_right(), options.softcap(), optional_tensor(options.alibi_slopes()),
                                 optional_tensor(options.sinks()));
  }
  const GeneralCall call = general_call(query, key_cache, value_cache, query_starts, key_lengths, options);
  return std::get<0>(attention(fn, query, call.key, call.value, call.options, /*need_weights=*/false));
}

std::string cache_route(const char* fn, const torch::Tensor& query, const torch::Tensor& key_cache,
                        const torch::Tensor& value_cache, const torch::Tensor& query_starts,
                        const torch::Tensor& key_lengths, const SdpaOptions& options) {
  if (uses_decode_kernel(query, key_cache, value_cache, options)) {
    return std::string("decode (") + (query.is_cpu() ? "cpu" : "cuda") + ")";
  }
  const GeneralCall call = general_call(query, key_cache, value_cache, query_starts, key_lengths, options);
  return route(fn, query, call.key, call.value, call.options, /*need_weights=*/false);
}

}  // namespace attn::backends
