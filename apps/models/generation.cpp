#include "generation.h"

#include "counted.h"

#include <algorithm>
#include <chrono>
#include <numeric>
#include <stdexcept>
#include <string>

namespace attn::models {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

int64_t check_fits_positions(const LlamaConfig& config, int64_t prompt_tokens, int64_t max_new_tokens,
                             int64_t draft_positions, const char* caller) {
  const int64_t limit = config.max_position_embeddings, needed = prompt_tokens + max_new_tokens + draft_positions;
  if (limit > 0 && needed > limit) {
    throw std::invalid_argument(std::string(caller) + ": a prompt of " + attn_apps::counted(prompt_tokens, "token") +
                                " plus " + attn_apps::counted(max_new_tokens, "new token") +
                                (draft_positions > 0 ? " and a draft of " + std::to_string(draft_positions) : "") +
                                " exceeds the model's " + std::to_string(limit) + " positions");
  }
  return needed;
}

GenerationResult generate(Llama& model, const std::vector<std::vector<int64_t>>& prompts,
                          const GenerationOptions& options, const TokenCallback& on_token) {
  if (prompts.empty()) throw std::invalid_argument("generate: no prompts");
  if (options.max_new_tokens < 1) {
    throw std::invalid_argument("generate: max_new_tokens must be >= 1, got " + std::to_string(options.max_new_tokens));
  }
  const int64_t batch = static_cast<int64_t>(prompts.size());
  std::vector<int64_t> lengths;
  for (const auto& prompt : prompts) {
    if (prompt.empty()) throw std::invalid_argument("generate: prompt " + std::to_string(lengths.size()) + " is empty");
    lengths.push_back(static_cast<int64_t>(prompt.size()));
  }
  const int64_t longest = *std::max_element(lengths.begin(), lengths.end());
  const int64_t capacity = check_fits_positions(model->config, longest, options.max_new_tokens, 0, "generate");

  torch::NoGradGuard no_grad;
  const torch::Device device = model->embed_tokens->weight.device();
  torch::Tensor ids = torch::zeros({batch, longest}, torch::kLong);
  for (int64_t b = 0; b < batch; ++b) {
    ids[b].narrow(0, 0, lengths[b]).copy_(torch::tensor(prompts[b], torch::kLong));
  }
  KVCache cache = model->make_cache(batch, capacity, options.kv_cache_dtype);
  std::vector<Sampler> samplers;
  for (int64_t b = 0; b < batch; ++b) {
    SamplingOptions sampling = options.sampling;
    sampling.seed += static_cast<uint64_t>(b);  // each row its own stream, the same whatever the batch
    samplers.emplace_back(sampling);
  }

  GenerationResult result;
  result.tokens.resize(batch);
  result.logits.resize(batch);
  result.prefill_tokens = std::accumulate(lengths.begin(), lengths.end(), int64_t{0});
  std::vector<bool> done(batch, false);
  // Chooses each unfinished row's token from its logits [B, vocab]; returns the next step's input ids [B, 1].
  const auto choose = [&](const torch::Tensor& step_logits) {
    const torch::Tensor rows = step_logits.to(torch::kCPU, torch::kFloat32);
    std::vector<int64_t> next(batch, 0);
    for (int64_t b = 0; b < batch; ++b) {
      if (done[b]) continue;
      next[b] = samplers[b].next(rows[b]);
      result.tokens[b].push_back(next[b]);
      if (options.keep_logits) result.logits[b].push_back(rows[b].clone());
      const auto& stops = options.stop_tokens;
      if (std::find(stops.begin(), stops.end(), next[b]) != stops.end() ||
          static_cast<int64_t>(result.tokens[b].size()) == options.max_new_tokens) {
        done[b] = true;
      }
      if (on_token) on_token(b, next[b]);
    }
    return torch::tensor(next, torch::kLong).view({batch, 1}).to(device);
  };

  auto start = std::chrono::steady_clock::now();
  const torch::Tensor hidden = model->hidden_states(ids.to(device), cache, lengths);
  const torch::Tensor last = torch::tensor(lengths, torch::kLong).sub(1).to(device);
  torch::Tensor next = choose(model->logits(hidden.index({torch::arange(batch, torch::kLong).to(device), last})));
  result.prefill_seconds = seconds_since(start);

  start = std::chrono::steady_clock::now();
  while (std::find(done.begin(), done.end(), false) != done.end()) {
    // Finished rows still take a step (their token is ignored): the batch keeps one shape.
    next = choose(model->logits(model->hidden_states(next, cache).select(1, 0)));
    ++result.decode_steps;
  }
  result.decode_seconds = seconds_since(start);
  return result;
}

}  // namespace attn::models
