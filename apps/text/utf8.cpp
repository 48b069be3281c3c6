#include "utf8.h"

#include <utf8proc.h>

#include <stdexcept>

namespace attn::text {

size_t utf8_sequence_length(unsigned char lead) {
  return lead < 0x80 ? 1 : (lead >> 5) == 0x6 ? 2 : (lead >> 4) == 0xE ? 3 : (lead >> 3) == 0x1E ? 4 : 1;
}

void append_utf8(char32_t c, std::string& out) {
  utf8proc_uint8_t bytes[4];
  const utf8proc_ssize_t n = utf8proc_encode_char(static_cast<utf8proc_int32_t>(c), bytes);
  out.append(reinterpret_cast<const char*>(bytes), static_cast<size_t>(n));
}

void check_utf8(std::string_view text, const std::string& what) {
  const auto* bytes = reinterpret_cast<const utf8proc_uint8_t*>(text.data());
  for (size_t at = 0; at < text.size();) {
    utf8proc_int32_t c = 0;
    const utf8proc_ssize_t n = utf8proc_iterate(bytes + at, static_cast<utf8proc_ssize_t>(text.size() - at), &c);
    if (n <= 0 || c < 0) {
      throw std::invalid_argument(what + " is not valid UTF-8 (at byte " + std::to_string(at) + ")");
    }
    at += static_cast<size_t>(n);
  }
}

}  // namespace attn::text
