#pragma once
// Streaming generated text: tokens arrive one at a time, and a token may end inside a UTF-8 character (byte
// fallback, or a multi-byte character split by the merges). TextStream prints only whole characters, holding
// the incomplete tail back until the next token completes it.

#include "byte_level_bpe.h"

#include <cstdint>
#include <string>
#include <vector>

namespace attn::text {

class TextStream {
 public:
  explicit TextStream(const ByteLevelBpe& tokenizer) : tokenizer_(tokenizer) {}
  /// Adds a token; returns the text that is now complete and was not returned before.
  std::string push(int64_t id);
  /// What is left at the end (an incomplete character, as it is).
  std::string finish();

 private:
  const ByteLevelBpe& tokenizer_;
  std::vector<int64_t> ids_;
  size_t emitted_ = 0;  // bytes of decode(ids_) already returned
};

/// The length of the longest prefix of `text` that does not end inside a UTF-8 character.
size_t complete_utf8_prefix(const std::string& text);

}  // namespace attn::text
