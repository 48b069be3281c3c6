#include "labels.h"

#include <algorithm>

namespace demo {
namespace {

bool starts_code_point(char c) { return (static_cast<unsigned char>(c) & 0xC0) != 0x80; }  // no continuation byte

}  // namespace

size_t code_points(const std::string& text) {
  return static_cast<size_t>(std::count_if(text.begin(), text.end(), starts_code_point));
}

std::string truncate_label(const std::string& word, size_t max_chars) {
  if (code_points(word) <= max_chars) return word;
  size_t kept = 0, end = 0;
  for (; end < word.size(); ++end) {
    if (starts_code_point(word[end]) && kept++ == max_chars - 1) break;
  }
  return word.substr(0, end) + "\u2026";
}

}  // namespace demo
