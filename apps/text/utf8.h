#pragma once
// The UTF-8 pieces the tokenizers and the text stream share.

#include <cstddef>
#include <string>
#include <string_view>

namespace attn::text {

/// Bytes of the UTF-8 character whose first byte is `lead`: 1 to 4, and 1 for a byte that cannot start one.
size_t utf8_sequence_length(unsigned char lead);

/// Appends code point `c` to `out` as UTF-8 (utf8proc's encoder).
void append_utf8(char32_t c, std::string& out);

/// Throws std::invalid_argument "WHAT is not valid UTF-8 (at byte N)" where `text` is not.
void check_utf8(std::string_view text, const std::string& what);

}  // namespace attn::text
