#pragma once
// A model's weights in one block of memory on huge pages.

#include <torch/nn/module.h>

#include <cstdint>
#include <string>

namespace attn {

/// What place_on_huge_pages did.
struct HugePagePlacement {
  int64_t tensors = 0;          // parameters and buffers now in the block
  int64_t bytes = 0;            // the bytes of their storages, copied into the block
  int64_t huge_page_bytes = 0;  // of those bytes, how many Linux backs with huge pages now (the block's
                                // AnonHugePages in /proc/self/smaps, at most `bytes`)
  int64_t skipped = 0;          // parameters and buffers left where they were: not on the CPU, or not strided
  std::string unavailable;      // why nothing moved (no huge pages on this system, or no memory); empty if it did
};

/// Copies the CPU parameters and buffers of `module` and its submodules into one block of memory that asks Linux
/// for transparent huge pages (madvise MADV_HUGEPAGE), and points them there: the same values, shapes, strides,
/// dtypes and requires_grad; tensors that shared a storage (tied weights, views) share the new one.
///
/// Why: a decoding step reads every weight once, and each 4 KB page it crosses costs a translation that the
/// hardware prefetcher waits on; under a hypervisor each one is a two-level walk. On 2 MB pages SmolLM2's
/// decode ran 1.16x (float32) and 1.08x (bfloat16) faster on an Intel Xeon guest (bench/RESULTS.md). Call it
/// after the module's last `to()` (which allocates anew) and before the work; it moves a storage at a time, so
/// memory peaks at the model plus its largest storage. A tensor outside the module that shared a parameter's
/// storage keeps the old memory and no longer shares it, as after `to()`.
///
/// Moves nothing, and says why in `unavailable`, where Linux's transparent huge pages are off
/// (/sys/kernel/mm/transparent_hugepage/enabled reads never) or absent (not Linux), or the block cannot be
/// mapped. Parameters on other devices and non-strided tensors are left as they are and counted in `skipped`.
/// Not thread-safe with other uses of the module.
HugePagePlacement place_on_huge_pages(torch::nn::Module& module);

}  // namespace attn
