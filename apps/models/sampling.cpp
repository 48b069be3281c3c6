#include "sampling.h"

#include <ATen/CPUGeneratorImpl.h>

#include <limits>
#include <stdexcept>
#include <string>

namespace attn::models {

Sampler::Sampler(const SamplingOptions& options)
    : options_(options), generator_(at::make_generator<at::CPUGeneratorImpl>(options.seed)) {
  if (!(options.temperature >= 0.0)) {
    throw std::invalid_argument("temperature must be >= 0 (0 is greedy), got " + std::to_string(options.temperature));
  }
  if (options.top_k < 0) throw std::invalid_argument("top_k must be >= 0 (0 keeps all), got " + std::to_string(options.top_k));
  if (!(options.top_p > 0.0 && options.top_p <= 1.0)) {
    throw std::invalid_argument("top_p must be in (0, 1], got " + std::to_string(options.top_p));
  }
}

int64_t Sampler::next(const torch::Tensor& logits) {
  TORCH_CHECK(logits.dim() == 1, "Sampler::next: logits must be [vocab], got ", logits.sizes());
  const torch::Tensor row = logits.to(torch::kCPU, torch::kFloat32);
  if (options_.temperature == 0.0) return row.argmax().item<int64_t>();

  torch::Tensor scores = row / options_.temperature;
  const double minus_inf = -std::numeric_limits<double>::infinity();
  if (options_.top_k > 0 && options_.top_k < scores.size(0)) {
    const torch::Tensor kth = std::get<0>(scores.topk(options_.top_k)).select(0, options_.top_k - 1);
    scores = scores.masked_fill(scores < kth, minus_inf);
  }
  if (options_.top_p < 1.0) {
    // Sorted ascending, as transformers' TopPLogitsWarper: drop the tokens whose cumulative probability from
    // the bottom stays within 1 - top_p, but never the most likely one.
    auto [sorted, order] = scores.sort(/*dim=*/0, /*descending=*/false);
    torch::Tensor drop = sorted.softmax(0).cumsum(0) <= (1.0 - options_.top_p);
    drop.index_put_({-1}, false);
    scores = scores.masked_fill(drop.scatter(0, order, drop), minus_inf);
  }
  return at::multinomial(scores.softmax(0), 1, /*replacement=*/false, generator_).item<int64_t>();
}

}  // namespace attn::models
