#include "text_stream.h"
#include "utf8.h"

namespace attn::text {

size_t complete_utf8_prefix(const std::string& text) {
  // Walk back over at most three continuation bytes to the lead byte of the last character.
  size_t lead = text.size();
  for (int back = 0; back < 4 && lead > 0; ++back) {
    const auto byte = static_cast<unsigned char>(text[lead - 1]);
    --lead;
    if ((byte & 0xC0) != 0x80) {
      return text.size() - lead >= utf8_sequence_length(byte) ? text.size() : lead;
    }
  }
  return text.size();  // not UTF-8 at the end: nothing to wait for
}

std::string TextStream::push(int64_t id) {
  // Decoding everything so far (not token by token) keeps any decoder rule that spans tokens; generations are
  // short enough for this to cost nothing next to a model step.
  ids_.push_back(id);
  const std::string text = tokenizer_.decode(ids_);
  const size_t end = complete_utf8_prefix(text);
  if (end <= emitted_) return {};
  std::string fresh = text.substr(emitted_, end - emitted_);
  emitted_ = end;
  return fresh;
}

std::string TextStream::finish() {
  const std::string text = tokenizer_.decode(ids_);
  std::string rest = emitted_ < text.size() ? text.substr(emitted_) : std::string();
  emitted_ = text.size();
  return rest;
}

}  // namespace attn::text
