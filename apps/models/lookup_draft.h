#pragma once
// Drafts for speculative decoding by lookup in the text so far (llama.cpp's lookup decoding, "prompt lookup"):
// the tokens that followed earlier occurrences of the sequence's last few tokens are proposed as candidates,
// as a TokenTree rooted at the token about to be fed. No second model: what it drafts costs nothing, and it
// pays off where the output repeats the prompt (summaries, code edits, extraction, lists).

#include <attn/token_tree.h>

#include <cstdint>
#include <vector>

namespace attn::models {

struct LookupOptions {
  /// Longest run of final tokens looked up; shorter runs are tried down to min_ngram when it is not found.
  int64_t max_ngram = 4, min_ngram = 2;
  /// Tokens drafted after each match.
  int64_t draft_tokens = 6;
  /// Different continuations kept (the most recent matches whose continuations differ), as branches.
  int64_t branches = 2;
};

/// Candidates for the step that feeds `next` (the token just chosen, not yet in the cache) after `history` (every
/// token before it): node 0 is `next` itself, the root; its descendants are the drafted continuations, merged
/// where they share a prefix. tokens[i] is node i's token; tree has parents in the order TokenTree wants.
struct Draft {
  std::vector<int64_t> tokens;
  std::vector<int64_t> parents;
};
Draft lookup_draft(const std::vector<int64_t>& history, int64_t next, const LookupOptions& options);

}  // namespace attn::models
