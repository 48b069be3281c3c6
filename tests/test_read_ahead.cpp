// apps/models' read_ahead_while: the decoding step's serial work on the calling thread, beside threads that read
// the next weights, only where the step has few rows and LibTorch has other threads; the work's result and its
// exception reach the caller.

#include "read_ahead.h"

#include <attn/cpu_kernel_info.h>

#include <ATen/Parallel.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <stdexcept>
#include <thread>
#include <vector>

namespace attn::models {
namespace {

/// Sets LibTorch's thread count for one test.
class Threads {
 public:
  explicit Threads(int n) : before_(at::get_num_threads()) { at::set_num_threads(n); }
  ~Threads() { at::set_num_threads(before_); }

 private:
  int before_;
};

// Whether this build's own parallel loops run their tasks beside each other: only then can anything read beside
// the work (a clang build compiles at::parallel_for without OpenMP, cmake/parallel_loops.cmake). attn's kernels
// are built the same way and say so.
bool loops_run_beside() { return attn::cpu_kernel_info().parallel_loops; }

// A few megabytes, so that the readers are still reading when a short work returns.
std::vector<torch::Tensor> next_weights() {
  return {torch::ones({1536, 576}, torch::kBFloat16), torch::ones({576, 1536}, torch::kBFloat16)};
}

TEST(ReadAhead, RunsTheWorkOnceOnTheCallingThreadBesideTheReaders) {
  const Threads threads(2);
  const std::vector<torch::Tensor> next = next_weights();
  const std::thread::id caller = std::this_thread::get_id();
  int runs = 0;
  bool in_region = false, on_caller = false;
  torch::Tensor product;
  const torch::Tensor a = torch::randn({64, 48}, torch::kFloat64), b = torch::randn({48, 32}, torch::kFloat64);
  read_ahead_while(next, 1, [&] {
    ++runs;
    in_region = at::in_parallel_region();
    on_caller = std::this_thread::get_id() == caller;
    product = torch::mm(a.to(torch::kFloat32), b.to(torch::kFloat32));  // LibTorch's own loops inside
  });
  EXPECT_EQ(runs, 1);
  EXPECT_EQ(in_region, loops_run_beside()) << "one decoding row with two threads: the work runs beside a reader "
                                               "where the build's loops run in parallel";
  EXPECT_TRUE(on_caller);
  EXPECT_TRUE(torch::allclose(product.to(torch::kFloat64), torch::mm(a, b), 1e-5, 1e-5));
}

TEST(ReadAhead, ManyRowsOrOneThreadRunTheWorkAlone) {
  const std::vector<torch::Tensor> next = next_weights();
  const auto runs_alone = [&](int64_t rows) {
    bool in_region = true;
    read_ahead_while(next, rows, [&] { in_region = at::in_parallel_region(); });
    return !in_region;
  };
  {
    const Threads threads(2);
    EXPECT_EQ(runs_alone(kReadAheadMaxRows), !loops_run_beside());
    EXPECT_TRUE(runs_alone(kReadAheadMaxRows + 1)) << "a prompt's rows multiply the weights from the caches";
    bool in_region = true;
    read_ahead_while({}, 1, [&] { in_region = at::in_parallel_region(); });
    EXPECT_FALSE(in_region) << "nothing to read";
  }
  const Threads threads(1);
  EXPECT_TRUE(runs_alone(1)) << "no other thread to read";
}

TEST(ReadAhead, TheWorksExceptionReachesTheCaller) {
  const Threads threads(2);
  const std::vector<torch::Tensor> next = next_weights();
  try {
    read_ahead_while(next, 1, [] { throw std::runtime_error("the work failed"); });
    FAIL() << "no exception";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("the work failed"), std::string::npos) << e.what();
  }
  // And the threads are free again: a second call runs.
  int runs = 0;
  read_ahead_while(next, 1, [&] { ++runs; });
  EXPECT_EQ(runs, 1);
}

}  // namespace
}  // namespace attn::models
