#pragma once
// glibc hands a freed block back to Linux when it was mapped on its own (above the mmap threshold) or when the
// free space at the top of the heap passes the trim threshold; the next tensor of that size then faults its
// pages in again, zeroed. A prefill of SmolLM2 allocates and frees its activations layer by layer: 30,000 to
// 110,000 page faults per 518-token prompt in float32 on an Intel Xeon guest, 0.1-0.3 s of a 0.5-0.9 s prefill
// (bench/RESULTS.md). The model apps keep freed memory in the process instead.

namespace attn_apps {

/// The mmap threshold (glibc's M_MMAP_THRESHOLD, its largest dynamic value) and the trim threshold
/// (M_TRIM_THRESHOLD) that keep_freed_memory() sets.
inline constexpr int kMmapThresholdBytes = 32 << 20;
inline constexpr int kTrimThresholdBytes = 256 << 20;

/// Sets both thresholds with mallopt, unless the environment sets either (MALLOC_MMAP_THRESHOLD_,
/// MALLOC_TRIM_THRESHOLD_ or GLIBC_TUNABLES), which then stands. Nothing off glibc.
void keep_freed_memory();

}  // namespace attn_apps
