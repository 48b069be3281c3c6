#include "backends/cache.h"

#include "backends/dispatch.h"
#include "backends/masks.h"
#include "backends/op_arguments.h"
#include "backends/validate.h"
#include "common/checks.h"
#include "common/dtypes.h"
#include "ops/attention_contract.h"

#include <attn/ops/decode_attention.h>

#include <ATen/ATen.h>

#include <algorithm>
#include <string>
#include <vector>

namespace attn::backends {

void check_cache_inputs(const char* fn, const torch::Tensor& query, const torch::Tensor& key_cache,
                        const torch::Tensor& value_cache, const torch::Tensor& query_starts,
                        const torch::Tensor& key_lengths, const SdpaOptions& options,
                        const ops::DecodeOnlyInputs& decode_only) {
  const ops::CacheSizes sizes =
      ops::check_cache_call(fn, query, key_cache, value_cache, query_starts, key_lengths, decode_only);
  const int64_t B = sizes.batch;
  check_score_options(fn, query, options, query.size(1), B);
  TORCH_CHECK(options.masks().empty(), fn,
              ": takes no masks: query_starts and key_lengths say which keys each query sees (use "
              "attn::scaled_dot_product_attention on the cache's keys for other masks)");
  if (options.scale()) TORCH_CHECK(std::isfinite(*options.scale()), fn, ": scale must be finite, got ", *options.scale());
  TORCH_CHECK(options.dropout() >= 0.0 && options.dropout() <= 1.0, fn, ": dropout must be in [0, 1], got ",
              options.dropout());
  if (decode_only.any()) {
    const char* what = decode_only.tree_mask.defined()     ? "a token tree"
                       : decode_only.block_table.defined() ? "a paged cache"
                                                           : "an int8 cache";
    TORCH_CHECK(query.is_cpu(), fn, ": ", what, " is read by attn's CPU decode kernel only, and the query is on ",
                query.device());
    TORCH_CHECK(options.backend() == Backend::Auto || options.backend() == Backend::Fused, fn, ": ", what,
                " is read by attn's decode kernel only (Backend::Auto or Backend::Fused), not by Backend::",
                to_string(options.backend()));
    TORCH_CHECK(options.dropout() == 0.0, fn, ": ", what, " is read by an inference kernel: dropout must be 0, got ",
                options.dropout());
    const bool needs_grad = at::GradMode::is_enabled() &&
                            (query.requires_grad() || (options.sinks().defined() && options.sinks().requires_grad()));
    TORCH_CHECK(!needs_grad, fn, ": ", what, " is read by an inference kernel, which computes no gradient; ",
                "call it under torch::NoGradGuard");
    ops::check_decode_variants(fn, sizes, query, options.causal(), optional_scale(options), options.window_left(),
                               options.window_right(), options.softcap(), optional_tensor(options.alibi_slopes()),
                               optional_tensor(options.sinks()), decode_only.tree_mask);
  } else if (!uses_decode_kernel(query, key_cache, value_cache, options, decode_only)) {
    // The general backends will read the cache: what they refuse (an option the asked backend lacks, dropout on
    // Backend::Fused) is refused here, before a module's step appends to its cache.
    resolve(fn, query, key_cache, value_cache, options, /*need_weights=*/false, /*packed=*/false);
  }
}

namespace {

/// Whether every row holds as many keys and its queries are the newest positions: the cache rule is then plain
/// bottom-right causality on the used prefix.
bool uniform_rows(at::ArrayRef<int64_t> starts, at::ArrayRef<int64_t> lengths, int64_t tq) {
  const int64_t used = *std::max_element(lengths.begin(), lengths.end());
  return std::all_of(lengths.begin(), lengths.end(), [&](int64_t l) { return l == used; }) &&
         std::all_of(starts.begin(), starts.end(), [&](int64_t s) { return s + tq == used; });
}

}  // namespace

bool uses_decode_kernel(const torch::Tensor& query, const torch::Tensor& key_cache, const torch::Tensor& value_cache,
                        const SdpaOptions& options, const ops::DecodeOnlyInputs& decode_only) {
  const bool sinks_need_grad = options.sinks().defined() && options.sinks().requires_grad();
  const bool needs_grad = at::GradMode::is_enabled() && (query.requires_grad() || key_cache.requires_grad() ||
                                                         value_cache.requires_grad() || sinks_need_grad);
  if (decode_only.any() || ops::is_int8_cache(key_cache)) return true;  // only the decode kernel reads them
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
  const torch::Tensor host_starts = ops::host_positions(query_starts), host_lengths = ops::host_positions(key_lengths);
  const at::ArrayRef<int64_t> starts(host_starts.data_ptr<int64_t>(), host_starts.numel());
  const at::ArrayRef<int64_t> lengths(host_lengths.data_ptr<int64_t>(), host_lengths.numel());
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
                              const torch::Tensor& key_lengths, const SdpaOptions& options,
                              const ops::DecodeOnlyInputs& decode_only) {
  if (uses_decode_kernel(query, key_cache, value_cache, options, decode_only)) {
    // The op reads the positions where they lie when they are int64 on the CPU, as a KVCache's are.
    return ops::decode_attention(query, key_cache, value_cache, query_starts, key_lengths,
                                 options.causal(), optional_scale(options), options.window_left(),
                                 options.window_right(), options.softcap(), optional_tensor(options.alibi_slopes()),
                                 optional_tensor(options.sinks()), optional_tensor(decode_only.key_scales),
                                 optional_tensor(decode_only.value_scales), optional_tensor(decode_only.block_table),
                                 optional_tensor(decode_only.tree_mask));
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
