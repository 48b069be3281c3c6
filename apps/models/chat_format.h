#pragma once
// A single-turn chat prompt in the model's own format, from the "chat" parts that scripts/convert-gguf.py
// writes to attn-convert.json: the chat template rendered once by transformers around placeholders, so that
// no Jinja runs here.

#include <optional>
#include <string>

namespace attn::models {

class ChatFormat {
 public:
  /// Reads attn-convert.json; std::nullopt when it has no chat parts (a model without a chat template).
  /// Throws std::runtime_error naming the file when it cannot be read or its parts are malformed.
  static std::optional<ChatFormat> from_file(const std::string& attn_convert_json);

  /// The text to encode: the user's message (and a system message, if not empty, in place of the template's
  /// default), followed by the start of the assistant's turn.
  std::string prompt(const std::string& user, const std::string& system = "") const;

 private:
  std::string user_before_, user_after_;                    // around the user message
  std::string system_before_, system_between_, system_after_;  // around a system and a user message
};

}  // namespace attn::models
