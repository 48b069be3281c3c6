#include "read_ahead.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>

namespace attn::models {
namespace {

constexpr int64_t kLine = 64;               // bytes per cache line
constexpr int64_t kLinesBetweenChecks = 64;  // a reader asks whether the work is done every 4 KB

#ifdef INTRA_OP_PARALLEL
constexpr bool kLoopsRunBeside = true;
#else
// at::parallel_for compiles here without OpenMP (a clang build, cmake/parallel_loops.cmake): its tasks would run
// one after another, so nothing could read beside the work.
constexpr bool kLoopsRunBeside = false;
#endif

/// A byte range of the next weights.
struct Span {
  const char* data;
  int64_t bytes;
};

/// Loads one word of every line of bytes [from, to) of the spans laid end to end, until `done`; returns their
/// sum, which the caller keeps so that the loads are not dropped.
uint64_t read_lines(const std::vector<Span>& spans, int64_t from, int64_t to, const std::atomic<bool>& done) {
  uint64_t sum = 0;
  int64_t start = 0;  // of the current span, in the spans laid end to end
  for (const Span& span : spans) {
    const int64_t lo = std::max(from, start), hi = std::min(to, start + span.bytes);
    for (int64_t at = lo; at < hi;) {
      if (done.load(std::memory_order_relaxed)) return sum;
      const int64_t stop = std::min(hi, at + kLine * kLinesBetweenChecks);
      for (; at < stop; at += kLine) {
        uint64_t word;
        std::memcpy(&word, span.data + (at - start), sizeof word);
        sum += word;
      }
    }
    start += span.bytes;
  }
  return sum;
}

}  // namespace

void read_ahead_while(const std::vector<torch::Tensor>& next, int64_t rows, const std::function<void()>& work) {
  const int threads = at::get_num_threads();
  std::vector<Span> spans;
  int64_t total = 0;
  for (const torch::Tensor& w : next) {
    if (!w.defined() || !w.is_cpu() || !w.is_contiguous() || w.nbytes() == 0) continue;
    spans.push_back({static_cast<const char*>(w.data_ptr()), static_cast<int64_t>(w.nbytes())});
    total += spans.back().bytes;
  }
  if (!kLoopsRunBeside || rows > kReadAheadMaxRows || threads < 2 || at::in_parallel_region() || spans.empty()) {
    return work();
  }
  std::atomic<bool> done{false};
  std::atomic<uint64_t> kept{0};
  // Task 0 runs on the calling thread (ATen hands a parallel loop's first chunk to it), the others read.
  at::parallel_for(0, threads, 1, [&](int64_t begin, int64_t end) {
    for (int64_t task = begin; task < end; ++task) {
      if (task == 0) {
        struct Finish {
          std::atomic<bool>& done;
          ~Finish() { done.store(true, std::memory_order_relaxed); }
        } finish{done};
        work();
      } else {
        const int64_t readers = threads - 1, share = (total + readers - 1) / readers;
        kept.fetch_add(read_lines(spans, (task - 1) * share, std::min(total, task * share), done),
                       std::memory_order_relaxed);
      }
    }
  });
}

}  // namespace attn::models
