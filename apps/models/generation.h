#pragma once
// Generating text with a Llama: the prompts of a batch prefilled together (right-padded, each row at its own
// length), then one token per row per step through the KV cache, until every row has met a stop token or
// max_new_tokens.

#include "llama.h"
#include "sampling.h"

#include <torch/torch.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

namespace attn::models {

struct GenerationOptions {
  int64_t max_new_tokens = 128;
  /// A row stops after producing one of these (it is kept in the row's tokens).
  std::vector<int64_t> stop_tokens;
  SamplingOptions sampling;
  /// The KV cache's dtype: the model's (default), or torch::kInt8 for int8 rows with a float32 scale per
  /// (token, head), about a quarter of a float32 cache's bytes (LlamaImpl::make_cache says what it takes).
  std::optional<torch::Dtype> kv_cache_dtype;
  /// Keep each step's logits (float32 [vocab] per row and step) in the result, for checking against a reference.
  bool keep_logits = false;
};

struct GenerationResult {
  /// The new tokens of each row.
  std::vector<std::vector<int64_t>> tokens;
  /// logits[row][step], when GenerationOptions::keep_logits.
  std::vector<std::vector<torch::Tensor>> logits;
  int64_t prefill_tokens = 0, decode_steps = 0;
  /// Wall-clock seconds of the prefill (through the first token's logits) and of every step after it.
  double prefill_seconds = 0.0, decode_seconds = 0.0;
};

/// Wall-clock seconds since `start`, as the results count them.
double seconds_since(std::chrono::steady_clock::time_point start);

/// Called with (row, token) as each token is chosen, in order.
using TokenCallback = std::function<void(int64_t row, int64_t token)>;

/// Throws std::invalid_argument where a prompt of `prompt_tokens` plus `max_new_tokens` new tokens, and
/// `draft_positions` more (a speculative step's widest draft; 0 otherwise), needs more positions than the model's
/// max_position_embeddings (when the config has one). `caller` begins the message. Returns the positions needed,
/// the KV cache's capacity. An app calls it once the prompt is tokenized, before it loads the weights.
int64_t check_fits_positions(const LlamaConfig& config, int64_t prompt_tokens, int64_t max_new_tokens,
                             int64_t draft_positions, const char* caller);

/// Generates from `prompts` (token ids, each non-empty). Throws std::invalid_argument for an empty prompt or
/// batch, or for prompt + max_new_tokens beyond the model's max_position_embeddings (when the config has one).
GenerationResult generate(Llama& model, const std::vector<std::vector<int64_t>>& prompts,
                          const GenerationOptions& options, const TokenCallback& on_token = {});

}  // namespace attn::models
