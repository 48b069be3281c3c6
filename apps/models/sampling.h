#pragma once
// Choosing the next token from a row of logits: greedy (argmax), or sampled after temperature, top-k and
// top-p (nucleus) filtering, in that order, as transformers' generate applies them. Seeded, so that a run
// repeats.

#include <torch/torch.h>

#include <cstdint>

namespace attn::models {

struct SamplingOptions {
  /// 0 is greedy decoding (top_k and top_p then do nothing); otherwise logits are divided by it.
  double temperature = 0.0;
  /// Keep the k most likely tokens; 0 keeps all.
  int64_t top_k = 0;
  /// Keep the smallest set of most likely tokens whose probability reaches top_p (always at least one); 1 keeps all.
  double top_p = 1.0;
  uint64_t seed = 0;
};

class Sampler {
 public:
  /// Throws std::invalid_argument for a negative temperature or top_k, or top_p outside (0, 1].
  explicit Sampler(const SamplingOptions& options);
  /// The next token for logits [vocab] (any floating dtype).
  int64_t next(const torch::Tensor& logits);

 private:
  SamplingOptions options_;
  at::Generator generator_;
};

}  // namespace attn::models
