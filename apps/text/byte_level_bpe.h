#pragma once
// A byte-level BPE tokenizer (GPT-2's scheme, used by Llama 3, Qwen, SmolLM...) read from a Hugging Face
// tokenizer.json: special tokens matched first, then the GPT-2 pre-tokenization regex (PCRE2, with Unicode
// properties), bytes mapped to printable characters, and the merges applied by rank. Decoding maps the
// characters back to bytes. Only what tokenizer.json files of this kind use is supported; anything else is
// refused by name when the file is read.

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace attn::text {

class ByteLevelBpe {
 public:
  /// Reads tokenizer.json. Throws std::runtime_error naming the file and what it cannot use.
  static ByteLevelBpe from_file(const std::string& tokenizer_json);
  ~ByteLevelBpe();
  ByteLevelBpe(ByteLevelBpe&&) noexcept;
  ByteLevelBpe& operator=(ByteLevelBpe&&) noexcept;

  /// Token ids of UTF-8 `text` (no BOS or EOS added). Special tokens written in the text ("<|im_start|>") become
  /// their ids. Throws std::invalid_argument if the text is not valid UTF-8.
  std::vector<int64_t> encode(std::string_view text) const;
  /// The text of `ids`; special tokens are written out unless `skip_special`. Bytes that do not form valid
  /// UTF-8 on their own (a token ending inside a character) come out as they are.
  std::string decode(const std::vector<int64_t>& ids, bool skip_special = false) const;
  /// The id of a token written as in the vocabulary ("<|im_end|>"), or -1.
  int64_t token_id(const std::string& token) const;
  int64_t vocab_size() const;
  bool is_special(int64_t id) const;

 private:
  struct State;
  explicit ByteLevelBpe(std::unique_ptr<State> state);
  std::vector<int64_t> encode_piece(std::string_view piece) const;
  std::unique_ptr<State> state_;
};

}  // namespace attn::text
