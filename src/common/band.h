#pragma once
// The one rule that combines causality with a sliding window: the band of keys j a query at diagonal position
// p may see is p - left <= j <= p + right (-1: that side unbounded), and causality bounds the right side at 0.
// backends/masks.h (Band, for the tensor backends and the KV cache's mask) and the CPU kernels both ask this.

#include <algorithm>
#include <cstdint>

namespace attn::common {

/// The kernels add causal_offset and the windows to positions, in int64. The ops refuse a position given as an
/// argument (a query's start) or a difference of positions (causal_offset) beyond ±kMaxPosition
/// (ops/attention_contract.cpp), and apply a window of kWindowReachingEveryKey or more as unbounded: from any
/// diagonal position (kMaxPosition + a tensor's size) it reaches past every key, so the allowed pairs are the
/// same, and every sum stays below 2^62.
constexpr int64_t kMaxPosition = int64_t{1} << 60;
constexpr int64_t kWindowReachingEveryKey = int64_t{1} << 61;

/// A window as the kernels apply it: -1 (unbounded) when it reaches every key anyway.
inline int64_t applied_window(int64_t window) { return window >= kWindowReachingEveryKey ? -1 : window; }

/// The right bound of the band with causality folded in (-1: unbounded).
inline int64_t band_right(bool causal, int64_t window_right) {
  if (!causal) return window_right;
  return window_right < 0 ? 0 : std::min<int64_t>(window_right, 0);
}

}  // namespace attn::common
