#pragma once
// How the CPU kernels spread their tasks over LibTorch's intra-op threads. Compiled once per instruction set
// with the kernel that includes it.

#include <ATen/Parallel.h>

#include <algorithm>
#include <atomic>
#include <cstdint>

namespace attn::ops::cpu::ATTN_KERNEL_NAMESPACE {

/// Runs `task(t, thread_state)` for t in [0, count) on LibTorch's intra-op threads, handing tasks out one at
/// a time: under a causal mask the tasks differ in cost, and a static split would leave a thread idle.
template <typename State, typename Task>
void run_tasks(int64_t count, const Task& task) {
  if (count <= 0) return;
  std::atomic<int64_t> next{0};
  const int64_t workers = std::min<int64_t>(at::get_num_threads(), count);
  at::parallel_for(0, workers, 1, [&](int64_t, int64_t) {
    State state;
    for (int64_t t = next.fetch_add(1); t < count; t = next.fetch_add(1)) task(t, state);
  });
}

}  // namespace attn::ops::cpu::ATTN_KERNEL_NAMESPACE
