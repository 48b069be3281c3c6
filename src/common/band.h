#pragma once
// The one rule that combines causality with a sliding window: the band of keys j a query at diagonal position
// p may see is p - left <= j <= p + right (-1: that side unbounded), and causality bounds the right side at 0.
// backends/masks.h (Band, for the tensor backends and the KV cache's mask) and the CPU kernels both ask this.

#include <algorithm>
#include <cstdint>

namespace attn::common {

/// The right bound of the band with causality folded in (-1: unbounded).
inline int64_t band_right(bool causal, int64_t window_right) {
  if (!causal) return window_right;
  return window_right < 0 ? 0 : std::min<int64_t>(window_right, 0);
}

}  // namespace attn::common
