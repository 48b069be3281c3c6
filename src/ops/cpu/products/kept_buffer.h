#pragma once
// Buffers that a kernel's calling thread keeps from one call to the next. A fresh buffer of megabytes comes from
// malloc as pages that other work's frees handed back to the system, mapped again a page at a time on every call:
// between other operations, those page faults cost an AMX Xeon's bfloat16 training step at T=1024 about a fifth of
// its time, and a decoding loop's splits a third of the decode kernel's samples (bench/RESULTS.md).

#include "ops/cpu/products/uninitialised.h"

#include <cstddef>
#include <cstdint>

namespace attn::ops::cpu::ATTN_KERNEL_NAMESPACE {

/// The calling thread's kept bytes for `Slot`, grown to at least `bytes` and kept for its next call. One buffer
/// per slot, whatever element type a call puts in it, so that routes of different types take turns in one.
template <typename Slot>
std::byte* kept_bytes(int64_t bytes) {
  thread_local Uninitialised<std::byte> kept;
  thread_local int64_t kept_size = 0;
  if (kept_size < bytes) {
    kept.allocate(bytes);
    kept_size = bytes;
  }
  return kept.data();
}

/// A buffer of n elements of T, uninitialised (and cache-line aligned): where it takes at most `max_kept_bytes`,
/// the calling thread's buffer for `Slot` (one per use that can be live at the same time); past it, `own`, which
/// the caller frees with its call, so that one long call does not pin its memory.
template <typename Slot, typename T>
T* kept_buffer(int64_t n, int64_t max_kept_bytes, Uninitialised<T>& own) {
  const int64_t bytes = n * static_cast<int64_t>(sizeof(T));
  if (bytes > max_kept_bytes) {
    own.allocate(n);
    return own.data();
  }
  return reinterpret_cast<T*>(kept_bytes<Slot>(bytes));
}

/// The fused kernel's packed operands, kept in five slots of up to 8 MB (40 MB a calling thread): slot n holds a
/// pass's nth pack on the route that packs it, AMX's tiles or the float tiles. A thread runs one call at a time and
/// a call runs one route, which holds five packs at most, so the routes share the slots. (The bfloat16 pairs still
/// pack into buffers of the call's own: kept, they ran slower in some measurements and faster in others on an AMX
/// Xeon with its tiles off, bench/RESULTS.md, and they are Zen 4's route.)
template <int N>
struct PackSlot;
inline constexpr int64_t kKeptPackBytes = int64_t{8} << 20;

}  // namespace attn::ops::cpu::ATTN_KERNEL_NAMESPACE
