// Thread safety and determinism. N threads run forward concurrently on one shared module in eval mode and
// every result is bitwise identical to the single-threaded one; the same seed gives bitwise the same outputs
// and gradients from run to run; and the results of the fused kernel and of attn::linear's few-row kernel do
// not depend on the thread count.

#include "support.h"

#include <attn/functional.h>

#include <atomic>
#include <iostream>
#include <thread>

namespace attn::test {
namespace {

struct Inputs {
  torch::Tensor x, padding;
};

Inputs make_inputs(int64_t seed) {
  torch::manual_seed(seed);
  torch::Tensor padding = torch::rand({2, 300}) < 0.2;
  padding.index_put_({torch::indexing::Slice(), 0}, false);
  return {torch::randn({2, 300, 64}), padding};
}

class SharedModule : public ::testing::TestWithParam<Backend> {};

TEST_P(SharedModule, ConcurrentForwardMatchesSingleThreaded) {
  torch::manual_seed(0);
  MultiHeadAttention mha(MultiHeadAttentionOptions(64, 4).causal(true).backend(GetParam()));
  mha->eval();
  constexpr int kThreads = 8, kInputs = 4, kRounds = 5;
  std::vector<Inputs> inputs;
  std::vector<torch::Tensor> expected;
  {
    torch::NoGradGuard no_grad;
    for (int i = 0; i < kInputs; ++i) {
      inputs.push_back(make_inputs(100 + i));
      expected.push_back(mha(inputs[i].x, inputs[i].x, inputs[i].x, AttentionMasks().key_padding_mask(inputs[i].padding)));
    }
  }
  std::atomic<int> mismatches{0}, errors{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      try {
        torch::NoGradGuard no_grad;  // grad mode is thread-local
        for (int round = 0; round < kRounds; ++round) {
          const int i = (t + round) % kInputs;
          const torch::Tensor out =
              mha(inputs[i].x, inputs[i].x, inputs[i].x, AttentionMasks().key_padding_mask(inputs[i].padding));
          if (!torch::equal(out, expected[i])) ++mismatches;
        }
      } catch (const std::exception&) {
        ++errors;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(errors.load(), 0);
  EXPECT_EQ(mismatches.load(), 0) << "of " << kThreads * kRounds << " concurrent calls";
}

INSTANTIATE_TEST_SUITE_P(Backends, SharedModule, ::testing::Values(Backend::Fused, Backend::Math),
                         [](const auto& info) { return info.param == Backend::Fused ? "fused" : "math"; });

/// Forward and backward of a module from a fixed seed, dropout included: the output and every gradient.
std::vector<torch::Tensor> seeded_training_step(Backend backend, double dropout) {
  torch::manual_seed(21);
  MultiHeadAttention mha(MultiHeadAttentionOptions(32, 4).dropout(dropout).backend(backend));
  mha->train();
  const Inputs in = make_inputs(5);
  const torch::Tensor x = in.x.narrow(2, 0, 32).clone().requires_grad_();
  const torch::Tensor out = mha(x, x, x, AttentionMasks().key_padding_mask(in.padding));
  out.pow(2).sum().backward();
  std::vector<torch::Tensor> results{out.detach(), x.grad()};
  for (const auto& p : mha->parameters()) results.push_back(p.grad());
  return results;
}

TEST(Determinism, SameSeedSameOutputsAndGradients) {
  for (const auto& [backend, dropout] : {std::pair{Backend::Fused, 0.0}, std::pair{Backend::Math, 0.0},
                                         std::pair{Backend::Auto, 0.2}}) {
    SCOPED_TRACE(dropout > 0 ? "math with dropout" : backend == Backend::Fused ? "fused" : "math");
    const auto first = seeded_training_step(backend, dropout);
    const auto second = seeded_training_step(backend, dropout);
    ASSERT_EQ(first.size(), second.size());
    for (size_t i = 0; i < first.size(); ++i) EXPECT_TRUE(torch::equal(first[i], second[i])) << "tensor " << i;
  }
}

// The fused kernel's forward and backward are bitwise the same for any at::set_num_threads. (LibTorch's own
// matrix products, e.g. a projection's weight gradient, may round differently with a different thread
// count; that is outside attn.) In a build without OpenMP in attn's loops (clang: the sanitizer build) the
// tile GEMMs are threaded by OpenBLAS, whose AVX2 kernels round differently for different thread counts, so
// there the results must agree to float rounding instead.
TEST(Determinism, FusedResultsDoNotDependOnTheThreadCount) {
  const int saved = at::get_num_threads();
  std::vector<std::vector<torch::Tensor>> runs;
  for (int threads : {1, 2, 3}) {
    at::set_num_threads(threads);
    torch::manual_seed(22);
    const torch::Tensor q = torch::randn({1, 4, 300, 32}).requires_grad_(),
                        k = torch::randn({1, 4, 700, 32}).requires_grad_(),
                        v = torch::randn({1, 4, 700, 16}).requires_grad_();
    const torch::Tensor out = scaled_dot_product_attention(q, k, v, SdpaOptions().causal(true).backend(Backend::Fused));
    out.pow(2).sum().backward();
    runs.push_back({out.detach(), q.grad(), k.grad(), v.grad()});
  }
  at::set_num_threads(saved);
  const bool bitwise = cpu_kernel_info().parallel_loops;
  if (!bitwise) std::cout << "[ NOTE     ] attn built without OpenMP: comparing to float rounding, not bitwise\n";
  for (size_t r = 1; r < runs.size(); ++r) {
    for (size_t i = 0; i < runs[0].size(); ++i) {
      if (bitwise) {
        EXPECT_TRUE(torch::equal(runs[0][i], runs[r][i])) << "threads run " << r << ", tensor " << i;
      } else {
        EXPECT_TRUE(torch::allclose(runs[0][i], runs[r][i], 1e-5, 1e-6)) << "threads run " << r << ", tensor " << i;
      }
    }
  }
}

// attn::linear's few-row kernel gives each output to one thread, summed in a fixed order, so its results are
// bitwise the same for any thread count (no BLAS inside, so also without OpenMP).
TEST(Determinism, LinearRowsResultsDoNotDependOnTheThreadCount) {
  const int saved = at::get_num_threads();
  torch::NoGradGuard no_grad;
  torch::manual_seed(23);
  const torch::Tensor x = torch::randn({2, 576}), w = torch::randn({3000, 576}), b = torch::randn({3000});
  std::vector<std::vector<torch::Tensor>> runs;
  for (int threads : {1, 2, 3}) {
    at::set_num_threads(threads);
    runs.push_back({attn::linear(x, w, b), attn::linear(x.to(torch::kBFloat16), w.to(torch::kBFloat16))});
  }
  at::set_num_threads(saved);
  for (size_t r = 1; r < runs.size(); ++r) {
    for (size_t i = 0; i < runs[0].size(); ++i) {
      EXPECT_TRUE(torch::equal(runs[0][i], runs[r][i])) << "threads run " << r << ", tensor " << i;
    }
  }
}

}  // namespace
}  // namespace attn::test
