#pragma once
// What the decode kernel (decode/decode_kernel.h) reads and writes, validated by the op (decode_attention_cpu.cpp).
#include "common/band.h"
#include "ops/cpu/math/kernel_layout.h"

#include <c10/core/ScalarType.h>

#include <cstdint>

namespace attn::ops::cpu {

/// A cache [B, H_kv, capacity, width] whose element type is a value: the decode kernel reads it as
/// View4<const KV> for the KV that `type` names (decode/decode_kernel.h lists the element types it reads).
/// An int8 cache also has a float scale per row, scales [B, H_kv, capacity] (strides ssb, ssh, 1).
struct CacheView {
  const void* data = nullptr;
  int64_t sb = 0, sh = 0, si = 0;
  at::ScalarType type = at::kFloat;
  const float* scales = nullptr;
  int64_t ssb = 0, ssh = 0;

  template <typename KV>
  View4<const KV> as() const {
    return {static_cast<const KV*>(data), sb, sh, si, 1};
  }
  /// The scales of row (b, h)'s positions from j on.
  const float* row_scales(int64_t b, int64_t h, int64_t j) const { return scales + b * ssb + h * ssh + j; }
};

/// The decode kernel: few queries (Tq <= 16 or so) per batch row against a KV cache. Query t of row b sits at
/// position p = query_starts[b] + t; it may attend key j iff j < key_lengths[b] and j lies in the band around
/// p: when causal j <= p, with a window p - window_left <= j <= p + window_right (backends/masks.h,
/// cache_blocked, states the same rule). T is the compute type; the caches keep their own element type.
template <typename T>
struct DecodeArgs {
  int64_t batch = 0, heads = 0, kv_heads = 0, tq = 0, dk = 0, dv = 0;
  View4<const T> q;          // [B, H, Tq, dk]
  CacheView k, v;            // [B, H_kv, capacity, dk|dv]
  const int64_t* query_starts = nullptr;  // [B]
  const int64_t* key_lengths = nullptr;   // [B], each <= capacity
  bool causal = true;
  T scale = 1;
  // The variants of FlashProblem, around each query's position p instead of a diagonal.
  int64_t window_left = -1, window_right = -1;
  T softcap = 0;
  const T* alibi = nullptr;  // slope of (row b, head h) at alibi[b * alibi_stride + h]
  int64_t alibi_stride = 0;
  const T* sinks = nullptr;  // [H]
  View4<T> out;              // [B, H, Tq, dv]

  int64_t right_bound() const { return common::band_right(causal, window_right); }
};

/// Keys per split of a row's cache: the split depends on the length only, never on the thread count, so
/// the merged result is bitwise the same at any thread count.
inline constexpr int64_t kDecodeKeyBlock = 256;

}  // namespace attn::ops::cpu
