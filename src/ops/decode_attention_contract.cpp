#include "ops/decode_attention_contract.h"

#include "common/checks.h"
#include "common/dtypes.h"
#include "ops/flash_attention_contract.h"

#include <ATen/ATen.h>

#include <cmath>
#include <utility>

namespace attn::ops {

at::Tensor host_positions(const at::Tensor& t) { return t.to(at::kCPU, at::kLong).contiguous(); }

CacheSizes check_cache_call(const char* fn, const at::Tensor& query, const at::Tensor& key_cache,
                            const at::Tensor& value_cache, const at::Tensor& query_starts,
                            const at::Tensor& key_lengths) {
  TORCH_CHECK(query.defined() && key_cache.defined() && value_cache.defined(), fn,
              ": query, key_cache and value_cache must be defined");
  TORCH_CHECK(query.dim() == 4, fn, ": query must be [B, H, Tq, d_k], got shape ", query.sizes());
  TORCH_CHECK(key_cache.dim() == 4, fn, ": key_cache must be [B, H_kv, capacity, d_k], got shape ", key_cache.sizes());
  TORCH_CHECK(value_cache.dim() == 4, fn, ": value_cache must be [B, H_kv, capacity, d_v], got shape ",
              value_cache.sizes());
  common::check_floating(fn, "query", query);
  common::check_same_device_dtype(fn, "key_cache", key_cache, "query", query);
  common::check_same_device_dtype(fn, "value_cache", value_cache, "query", query);
  const CacheSizes s{query.size(0), query.size(1),     query.size(2),      query.size(3),
                     key_cache.size(1), key_cache.size(2), value_cache.size(3)};
  TORCH_CHECK(key_cache.size(0) == s.batch && s.kv_heads > 0 && s.heads % s.kv_heads == 0 && key_cache.size(3) == s.dk,
              fn, ": key_cache must be [B, H_kv, capacity, d_k] = [", s.batch, ", H_kv, capacity, ", s.dk,
              "] with H_kv dividing the query's ", s.heads, " heads, got key_cache ", key_cache.sizes(), " for query ",
              query.sizes());
  TORCH_CHECK(value_cache.size(0) == s.batch && value_cache.size(1) == s.kv_heads && value_cache.size(2) == s.capacity,
              fn, ": value_cache must be [B, H_kv, capacity, d_v] = [", s.batch, ", ", s.kv_heads, ", ", s.capacity,
              ", d_v] to match key_cache, got value_cache ", value_cache.sizes());
  TORCH_CHECK(s.dk > 0, fn, ": d_k (query's last dimension) must be positive, got query ", query.sizes());
  for (const auto& [arg, t] : {std::pair<const char*, const at::Tensor&>{"query_starts", query_starts},
                               std::pair<const char*, const at::Tensor&>{"key_lengths", key_lengths}}) {
    TORCH_CHECK(t.defined() && t.dim() == 1 && t.size(0) == s.batch, fn, ": ", arg, " must be [B] = [", s.batch,
                "], got ", t.defined() ? t.sizes() : at::IntArrayRef{});
    TORCH_CHECK(at::isIntegralType(t.scalar_type(), /*includeBool=*/false), fn, ": ", arg,
                " must hold integers, got ", common::dtype_name(t));
  }
  const at::Tensor starts = host_positions(query_starts), lengths = host_positions(key_lengths);
  const int64_t* start = starts.data_ptr<int64_t>();
  const int64_t* length = lengths.data_ptr<int64_t>();
  for (int64_t b = 0; b < s.batch; ++b) {
    TORCH_CHECK(length[b] >= 0 && length[b] <= s.capacity, fn, ": key_lengths[", b, "] = ", length[b],
                " must be in [0, capacity = ", s.capacity, "]");
    TORCH_CHECK(start[b] >= 0, fn, ": query_starts[", b, "] = ", start[b], " must be >= 0");
  }
  return s;
}

FlashArguments check_decode_variants(const char* fn, const CacheSizes& s, const at::Tensor& query, bool is_causal,
                                     c10::optional<double> scale, int64_t window_left, int64_t window_right,
                                     double softcap, const c10::optional<at::Tensor>& alibi_slopes,
                                     const c10::optional<at::Tensor>& sinks) {
  if (scale) TORCH_CHECK(std::isfinite(*scale), fn, ": scale must be finite, got ", *scale);
  FlashArguments a;
  a.is_causal = is_causal, a.scale = scale;
  a.window_left = window_left, a.window_right = window_right, a.softcap = softcap;
  a.alibi_slopes = alibi_slopes, a.sinks = sinks;
  FlashSizes sizes{s.batch, s.heads, s.tq, s.capacity, s.dk, s.dv, s.kv_heads};
  check_variant_args(fn, sizes, query, a);
  return a;
}

}  // namespace attn::ops
