#pragma once
// Buffers that a kernel's calling thread keeps from one call to the next. A fresh buffer of megabytes comes from
// malloc as pages that other work's frees handed back to the system, mapped again a page at a time on every call:
// between other operations, those page faults cost an AMX Xeon's bfloat16 training step at T=1024 about a fifth of
// its time, and a decoding loop's splits a third of the decode kernel's samples (bench/RESULTS.md).

#include "ops/cpu/products/uninitialised.h"

#include <cstdint>

namespace attn::ops::cpu::ATTN_KERNEL_NAMESPACE {

/// A buffer of n elements of T, uninitialised: where n is at most `max_kept`, the calling thread's buffer for
/// `Slot` (one per use that can be live at the same time), grown to fit and kept for the thread's next call;
/// past it, `own`, which the caller frees with its call, so that one long call does not pin its memory.
template <typename Slot, typename T>
T* kept_buffer(int64_t n, int64_t max_kept, Uninitialised<T>& own) {
  if (n > max_kept) {
    own.allocate(n);
    return own.data();
  }
  thread_local Uninitialised<T> kept;
  thread_local int64_t kept_size = 0;
  if (kept_size < n) {
    kept.allocate(n);
    kept_size = n;
  }
  return kept.data();
}

}  // namespace attn::ops::cpu::ATTN_KERNEL_NAMESPACE
