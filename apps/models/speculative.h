#pragma once
// Greedy generation that verifies drafted tokens in one step: a lookup draft (lookup_draft.h) proposes a tree
// of continuations, the model scores the whole tree through the KV cache at once (forward_with_tree), and the
// longest drafted path that greedy decoding would have produced is kept (KVCache::keep_candidates) with one
// more token from the last accepted node's logits. The tokens are greedy decoding's; the steps are fewer
// wherever a draft is accepted.

#include "generation.h"
#include "lookup_draft.h"

namespace attn::models {

struct SpeculativeStats {
  int64_t steps = 0;             ///< model calls after the prefill
  int64_t drafted_tokens = 0;    ///< candidates proposed, the root excluded
  int64_t accepted_tokens = 0;   ///< of them, kept
};

/// The most positions one step scores: every branch's draft and the root.
inline int64_t widest_draft(const LookupOptions& lookup) { return lookup.branches * lookup.draft_tokens + 1; }

/// generate() with greedy sampling, one prompt at a time, each step verifying a lookup draft. Throws
/// std::invalid_argument where options.sampling is not greedy (temperature 0), as generate() does for bad
/// prompts. The result's decode_steps count the model calls; `stats` (optional) gets the drafting counts.
GenerationResult generate_speculative(Llama& model, const std::vector<std::vector<int64_t>>& prompts,
                                      const GenerationOptions& options, const LookupOptions& lookup,
                                      SpeculativeStats* stats = nullptr, const TokenCallback& on_token = {});

}  // namespace attn::models
