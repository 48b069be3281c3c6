#pragma once
// BERT's WordPiece tokenizer (BERT, MiniLM, sentence-transformers' all-MiniLM-L6-v2...) read from a Hugging Face
// tokenizer.json, giving the ids that Hugging Face `tokenizers` gives: special tokens written in the text matched
// first, then BertNormalizer (control characters removed, whitespace made spaces, spaces put around CJK
// ideographs, accents stripped through NFD, lowercasing), BertPreTokenizer (split on whitespace, each punctuation
// character a word of its own), greedy longest-match-first WordPiece with "##" continuations, and the template
// that puts [CLS] before and [SEP] after. Unicode data comes from utf8proc, corrected where `tokenizers`' own
// tables are older. Only what tokenizer.json files of this kind use is supported; anything else is refused by
// name when the file is read.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace attn::text {

class WordPiece {
 public:
  /// Reads tokenizer.json. Throws std::runtime_error naming the file and what it cannot use.
  static WordPiece from_file(const std::string& tokenizer_json);
  ~WordPiece();
  WordPiece(WordPiece&&) noexcept;
  WordPiece& operator=(WordPiece&&) noexcept;

  /// Token ids of UTF-8 `text`, with the template's special tokens ([CLS] ... [SEP]) around unless
  /// `add_special_tokens` is false. Throws std::invalid_argument if the text is not valid UTF-8.
  std::vector<int64_t> encode(std::string_view text, bool add_special_tokens = true) const;
  /// As encode, with the text's tokens cut after the first max_length minus the special tokens' count (Hugging
  /// Face's truncation=True, max_length=N). Throws std::invalid_argument if max_length cannot hold the special
  /// tokens (where Hugging Face silently does not truncate).
  std::vector<int64_t> encode_truncated(std::string_view text, size_t max_length, bool add_special_tokens = true) const;
  /// The id of a token written as in the vocabulary ("[CLS]", "##ing"), or -1.
  int64_t token_id(const std::string& token) const;
  /// The token with id `id`. Throws std::out_of_range outside the vocabulary.
  std::string token(int64_t id) const;
  /// One more than the largest id.
  int64_t vocab_size() const;
  /// The id that pads batches: tokenizer.json's padding.pad_id, else that of "[PAD]", else -1.
  int64_t pad_id() const;

 private:
  struct State;
  explicit WordPiece(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

}  // namespace attn::text
