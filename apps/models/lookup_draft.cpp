#include "lookup_draft.h"

#include <algorithm>

namespace attn::models {

Draft lookup_draft(const std::vector<int64_t>& history, int64_t next, const LookupOptions& options) {
  Draft draft{{next}, {-1}};
  std::vector<int64_t> text = history;
  text.push_back(next);
  const int64_t n = static_cast<int64_t>(text.size());
  std::vector<std::vector<int64_t>> continuations;
  for (int64_t size = std::min(options.max_ngram, n - 1); size >= options.min_ngram; --size) {
    // The most recent earlier occurrences of the last `size` tokens first.
    for (int64_t start = n - size - 1; start >= 0 && static_cast<int64_t>(continuations.size()) < options.branches;
         --start) {
      if (!std::equal(text.begin() + start, text.begin() + start + size, text.end() - size)) continue;
      const int64_t from = start + size, to = std::min(n, from + options.draft_tokens);
      if (from >= to) continue;
      std::vector<int64_t> continuation(text.begin() + from, text.begin() + to);
      const bool seen = std::any_of(continuations.begin(), continuations.end(), [&](const std::vector<int64_t>& c) {
        return c.front() == continuation.front();
      });
      if (!seen) continuations.push_back(std::move(continuation));
    }
    if (!continuations.empty()) break;
  }
  // Merged into a trie under the root: a node per distinct prefix, listed parent first.
  for (const std::vector<int64_t>& continuation : continuations) {
    int64_t parent = 0;
    for (int64_t token : continuation) {
      int64_t child = -1;
      for (int64_t i = 0; i < static_cast<int64_t>(draft.tokens.size()); ++i) {
        if (draft.parents[i] == parent && draft.tokens[i] == token) child = i;
      }
      if (child < 0) {
        draft.tokens.push_back(token);
        draft.parents.push_back(parent);
        child = static_cast<int64_t>(draft.tokens.size()) - 1;
      }
      parent = child;
    }
  }
  return draft;
}

}  // namespace attn::models
