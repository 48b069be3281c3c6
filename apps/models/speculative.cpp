#include "speculative.h"

#include <algorithm>
#include <chrono>
#include <stdexcept>
#include <string>

namespace attn::models {
namespace {

int64_t greedy(const torch::Tensor& logits) { return logits.argmax(-1).item<int64_t>(); }

}  // namespace

GenerationResult generate_speculative(Llama& model, const std::vector<std::vector<int64_t>>& prompts,
                                      const GenerationOptions& options, const LookupOptions& lookup,
                                      SpeculativeStats* stats, const TokenCallback& on_token) {
  if (options.sampling.temperature != 0.0) {
    throw std::invalid_argument("generate_speculative: verifies greedy decoding only (temperature 0), got temperature " +
                                std::to_string(options.sampling.temperature));
  }
  if (lookup.draft_tokens < 1 || lookup.branches < 1 || lookup.min_ngram < 1 || lookup.max_ngram < lookup.min_ngram) {
    throw std::invalid_argument("generate_speculative: draft_tokens and branches must be >= 1 and "
                                "1 <= min_ngram <= max_ngram");
  }
  if (prompts.empty()) throw std::invalid_argument("generate_speculative: no prompts");
  if (options.max_new_tokens < 1) {
    throw std::invalid_argument("generate_speculative: max_new_tokens must be >= 1, got " +
                                std::to_string(options.max_new_tokens));
  }
  torch::NoGradGuard no_grad;
  const torch::Device device = model->embed_tokens->weight.device();
  const int64_t widest = widest_draft(lookup);
  GenerationResult result;
  result.tokens.resize(prompts.size());
  result.logits.resize(prompts.size());
  SpeculativeStats counts;
  for (size_t row = 0; row < prompts.size(); ++row) {
    const std::vector<int64_t>& prompt = prompts[row];
    if (prompt.empty()) throw std::invalid_argument("generate_speculative: prompt " + std::to_string(row) + " is empty");
    const int64_t capacity = check_fits_positions(model->config, static_cast<int64_t>(prompt.size()),
                                                  options.max_new_tokens, widest, "generate_speculative");
    KVCache cache = model->make_cache(1, capacity, options.kv_cache_dtype);
    std::vector<int64_t>& out = result.tokens[row];
    std::vector<int64_t> history = prompt;
    history.pop_back();  // the cache holds history; `next` is fed by the step that scores it
    bool done = false;
    // Emits a chosen token; false once the row is finished.
    const auto emit = [&](int64_t token, const torch::Tensor& logits) {
      out.push_back(token);
      if (options.keep_logits) result.logits[row].push_back(logits.to(torch::kCPU, torch::kFloat32).clone());
      if (on_token) on_token(static_cast<int64_t>(row), token);
      const auto& stops = options.stop_tokens;
      done = std::find(stops.begin(), stops.end(), token) != stops.end() ||
             static_cast<int64_t>(out.size()) == options.max_new_tokens;
      return !done;
    };

    auto start = std::chrono::steady_clock::now();
    if (!history.empty()) {  // the prompt but its last token, which the first step feeds as its tree's root
      model->hidden_states(torch::tensor(history, torch::kLong).view({1, -1}).to(device), cache);
    }
    result.prefill_seconds += seconds_since(start);
    int64_t next = prompt.back();
    start = std::chrono::steady_clock::now();
    while (!done) {
      const Draft draft = lookup_draft(history, next, lookup);
      const TokenTree tree(draft.parents);
      const torch::Tensor candidates = torch::tensor(draft.tokens, torch::kLong).view({1, -1}).to(device);
      const torch::Tensor logits = model->logits(model->tree_hidden_states(candidates, cache, tree))[0];  // [N, vocab]
      ++counts.steps;
      counts.drafted_tokens += tree.size() - 1;
      // Walk down the tree while greedy decoding agrees with the draft; every node walked is kept.
      int64_t node = 0;
      history.push_back(next);
      while (true) {
        const int64_t token = greedy(logits[node]);
        if (!emit(token, logits[node])) break;
        int64_t child = -1;
        for (int64_t c : tree.children(node)) {
          if (draft.tokens[c] == token) child = c;
        }
        if (child < 0) {
          next = token;
          break;
        }
        node = child;
        ++counts.accepted_tokens;
        history.push_back(token);
      }
      cache.keep_path(tree, {node});
    }
    result.decode_seconds += seconds_since(start);
  }
  result.decode_steps = counts.steps;
  result.prefill_tokens = 0;
  for (const auto& prompt : prompts) result.prefill_tokens += static_cast<int64_t>(prompt.size());
  if (stats) *stats = counts;
  return result;
}

}  // namespace attn::models
