// A preloaded library that counts and times every top-level LibTorch operation of a process (one that no other
// operation on its thread encloses: attn::linear_rows, aten::add, aten::view, ...), and prints both per name to
// stderr at exit. scripts/decode-op-times.py builds it and runs attn-generate under it, to see how a decoding
// step's time divides among its operations and what lies outside them:
//
//   LD_PRELOAD=op-times.so attn-generate ...   # stderr ends with "op-times NAME COUNT SECONDS" lines
//
// It hooks RecordFunction (LibTorch's profiler callbacks), which every dispatched operation passes through but a
// few that LibTorch leaves unobserved (aten::size and the like), so it needs nothing from the program it runs in.
// An operation that a worker thread dispatches inside another's parallel loop counts as top-level on that thread.
// The callbacks cost about half a microsecond an operation on a Zen 4 (bench/RESULTS.md).

#include <ATen/record_function.h>

#include <chrono>
#include <cstdio>
#include <map>
#include <mutex>
#include <string>

namespace {

using Clock = std::chrono::steady_clock;

struct Totals {
  long count = 0;
  double seconds = 0;
};

std::mutex totals_mutex;
// Never freed: the callbacks may run during static destruction (worker threads, other libraries' destructors).
auto* totals = new std::map<std::string, Totals>;

thread_local int depth = 0;  // operations open on this thread
thread_local Clock::time_point started;

std::unique_ptr<at::ObserverContext> on_enter(const at::RecordFunction&) {
  if (depth++ == 0) started = Clock::now();
  return nullptr;
}

void on_exit(const at::RecordFunction& fn, at::ObserverContext*) {
  if (--depth != 0) return;
  const double seconds = std::chrono::duration<double>(Clock::now() - started).count();
  const std::lock_guard<std::mutex> lock(totals_mutex);
  Totals& t = (*totals)[fn.name()];
  ++t.count;
  t.seconds += seconds;
}

struct Hook {
  Hook() { at::addGlobalCallback(at::RecordFunctionCallback(on_enter, on_exit).scopes({at::RecordScope::FUNCTION})); }
  ~Hook() {
    const std::lock_guard<std::mutex> lock(totals_mutex);
    for (const auto& [name, t] : *totals) std::fprintf(stderr, "op-times %s %ld %.9f\n", name.c_str(), t.count, t.seconds);
  }
} hook;

}  // namespace
