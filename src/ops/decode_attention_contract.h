#pragma once
// The rules of a call on a KV cache, defined once: attn::decode_attention's kernels (ops/cpu/, ops/cuda/) and
// the backends' general path for caches (backends/cache.cpp) all check them here.

#include <attn/ops/flash_attention.h>

#include <ATen/core/Tensor.h>
#include <c10/util/Optional.h>

#include <cstdint>

namespace attn::ops {

struct CacheSizes {
  int64_t batch, heads, tq, dk, kv_heads, capacity, dv;
};

/// Checks query [B, H, Tq, d_k] (floating, d_k > 0), key_cache [B, H_kv, capacity, d_k] and value_cache
/// [B, H_kv, capacity, d_v] (H_kv dividing H; the query's device and dtype), query_starts and key_lengths [B]
/// integer tensors with query_starts[b] >= 0 and 0 <= key_lengths[b] <= capacity. `fn` names the caller.
CacheSizes check_cache_call(const char* fn, const at::Tensor& query, const at::Tensor& key_cache,
                            const at::Tensor& value_cache, const at::Tensor& query_starts,
                            const at::Tensor& key_lengths);

/// The decode op's variants (its arguments after the positions) as a fused call's arguments, checked as the
/// fused op checks its own (check_variant_args), the scale included.
FlashArguments check_decode_variants(const char* fn, const CacheSizes& s, const at::Tensor& query, bool is_causal,
                                     c10::optional<double> scale, int64_t window_left, int64_t window_right,
                                     double softcap, const c10::optional<at::Tensor>& alibi_slopes,
                                     const c10::optional<at::Tensor>& sinks);

/// Positions as the kernels read them: [B] int64 on the CPU, contiguous. `t` itself where it is so already (a
/// KVCache's lengths are), else a converted copy.
at::Tensor host_positions(const at::Tensor& t);

}  // namespace attn::ops
