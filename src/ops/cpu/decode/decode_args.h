#pragma once
// What the decode kernel (decode/decode_kernel.h) reads and writes, validated by the op (decode_attention_cpu.cpp).
#include "common/band.h"
#include "ops/cpu/math/kernel_layout.h"

#include <attn/ops/decode_attention.h>

#include <c10/core/ScalarType.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Exception.h>

#include <cstdint>
#include <limits>
#include <type_traits>
#include <utility>

namespace attn::ops::cpu {

/// A cache whose element type is a value (decode/decode_kernel.h lists the element types it reads), kept in one
/// of two forms:
///  - contiguous, [B, H_kv, capacity, width]: position j of row b at data + b·sb + h·sh + j·si;
///  - paged, blocks [num_blocks, H_kv, block_size, width]: position j of row b in block
///    blocks[b · blocks_stride + j / block_size], at slot j % block_size (sb is then the stride of a block).
/// An int8 cache also has a float scale per row, scales [B or num_blocks, H_kv, capacity or block_size] (strides
/// ssb, ssh, 1).
struct CacheView {
  const void* data = nullptr;
  int64_t sb = 0, sh = 0, si = 0;
  at::ScalarType type = at::kFloat;
  const float* scales = nullptr;
  int64_t ssb = 0, ssh = 0;
  const int64_t* blocks = nullptr;  // paged: the block table [B, blocks_stride]
  int64_t blocks_stride = 0, block_size = 0;

  /// Where position j of row b and head h starts: its block and its offset in it.
  std::pair<int64_t, int64_t> locate(int64_t b, int64_t j) const {
    if (blocks == nullptr) return {b, j};
    return {blocks[b * blocks_stride + j / block_size], j % block_size};
  }
  template <typename KV>
  const KV* row(int64_t b, int64_t h, int64_t j) const {
    const auto [block, slot] = locate(b, j);
    return static_cast<const KV*>(data) + block * sb + h * sh + slot * si;
  }
  /// The scales of row (b, h)'s positions from j on (to the end of j's block when paged).
  const float* row_scales(int64_t b, int64_t h, int64_t j) const {
    const auto [block, slot] = locate(b, j);
    return scales + block * ssb + h * ssh + slot;
  }
};

/// The query's or the output's rows [B, H, Tq, d] in the op's own element type (float, double or bfloat16), row
/// (b, h, t) at data + b·sb + h·sh + t·si elements: the kernel widens a query row to the compute type as it packs
/// it, and rounds an output row once as it writes it, so a bfloat16 step needs no converted copy of either.
template <typename Data>
struct ElementRows {
  Data* data = nullptr;
  int64_t sb = 0, sh = 0, si = 0;
  at::ScalarType type = at::kFloat;

  /// Calls f with a typed pointer to row (b, h, t).
  template <typename F>
  void with_row(int64_t b, int64_t h, int64_t t, F&& f) const {
    const int64_t offset = b * sb + h * sh + t * si;
    switch (type) {
      case at::kFloat: return f(static_cast<Typed<float>*>(data) + offset);
      case at::kDouble: return f(static_cast<Typed<double>*>(data) + offset);
      case at::kBFloat16: return f(static_cast<Typed<c10::BFloat16>*>(data) + offset);
      default: TORCH_INTERNAL_ASSERT(false, "attn: the decode kernel takes no ", c10::toString(type), " query");
    }
  }

 private:
  template <typename E>
  using Typed = std::conditional_t<std::is_const_v<Data>, const E, E>;
};

/// Widens row (b, h, t) of `rows` into dst[0, n).
template <typename T>
void read_row(const ElementRows<const void>& rows, int64_t b, int64_t h, int64_t t, int64_t n, T* dst) {
  rows.with_row(b, h, t, [&](const auto* src) {
    for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<T>(src[i]);
  });
}

/// Writes src[0, n) · scale to row (b, h, t) of `rows`, rounded once to its element type.
template <typename T>
void write_row(const ElementRows<void>& rows, int64_t b, int64_t h, int64_t t, int64_t n, const T* src, T scale) {
  rows.with_row(b, h, t, [&](auto* dst) {
    using E = std::remove_pointer_t<decltype(dst)>;
    for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<E>(src[i] * scale);
  });
}

/// The decode kernel: few queries (Tq <= 16 or so) per batch row against a KV cache. Query t of row b sits at
/// position p = query_starts[b] + t; it may attend key j iff j < key_lengths[b] and j lies in the band around
/// p: when causal j <= p, with a window p - window_left <= j <= p + window_right (backends/masks.h,
/// cache_blocked, states the same rule). T is the compute type; the caches keep their own element type.
template <typename T>
struct DecodeArgs {
  int64_t batch = 0, heads = 0, kv_heads = 0, tq = 0, dk = 0, dv = 0;
  ElementRows<const void> q;  // [B, H, Tq, dk]
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
  // Candidates of a token tree (speculative decoding): query t of row b may attend position query_starts[b] + u
  // (u < Tq) only where tree[b · tree_stride + t · Tq + u]; the positions before query_starts[b] as usual.
  const bool* tree = nullptr;
  int64_t tree_stride = 0;
  ElementRows<void> out;      // [B, H, Tq, dv], in the query's element type
  // An int8 cache's products as integer dot products (products/int8_dot.h), chosen once per call by the op
  // (int8_dot_route_chosen and int8_dot_fits); otherwise its elements are widened to float.
  bool int8_dot = false;
  // A bfloat16 query over a bfloat16 cache, with many rows per K/V head, on AMX's tiles (decode/decode_amx.h),
  // chosen once per call by the op (decode_takes_amx).
  bool amx = false;

  int64_t right_bound() const { return common::band_right(causal, window_right); }
};

/// Keys per split of a row's cache of KV elements: the split depends on the length and the element type only,
/// never on the thread count, so the merged result is bitwise the same at any thread count. A split starts
/// cold (its first rows wait on memory before the prefetches run ahead), so an int8 split, whose rows are half
/// a bfloat16 one's, takes 1024 keys: about 0.75x the time of 256 and 0.9x that of 512 on the decode bench's
/// int8 rows (bench/RESULTS.md, issue 33). A bfloat16 split of 512 keys measured no faster than 256. (The two
/// lengths are public, <attn/ops/decode_attention.h>: a PagedKVCache takes its blocks in runs of a split.)
template <typename KV>
constexpr int64_t split_keys() { return sizeof(KV) == 1 ? kDecodeSplitKeysInt8 : kDecodeSplitKeys; }

}  // namespace attn::ops::cpu
