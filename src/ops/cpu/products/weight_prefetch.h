#pragma once
// linear_rows' weights stream once, in order, through both of its routes (bfloat16 pairs and widened to float).
// The hardware prefetcher follows such a stream but loses it at each 4 KB page, so the readers ask for the
// lines a fixed distance ahead themselves. One distance for both routes, defined here.

#include <cstdint>

namespace attn::ops::cpu {

/// How far ahead of the line being read a weight stream's reader prefetches, in bytes. 2 KB measured best for
/// both routes (bench/RESULTS.md, "Prefetching bfloat16 weights" and "Prefetching widened weights").
inline constexpr int64_t kWeightPrefetchAhead = 2048;

/// Prefetches the cache lines of the `bytes` bytes kWeightPrefetchAhead past `at`: the part of the stream that
/// one step of the reader's loop will read that far ahead. A prefetch past the weights' end never faults.
inline void prefetch_weights_ahead(const void* at, int64_t bytes) {
  constexpr int64_t kLine = 64;  // bytes per cache line
  const char* ahead = static_cast<const char*>(at) + kWeightPrefetchAhead;
  for (int64_t b = 0; b < bytes; b += kLine) __builtin_prefetch(ahead + b);
}

}  // namespace attn::ops::cpu
