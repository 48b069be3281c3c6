#pragma once
// The cause of a failure in one line, for attn's own messages: c10::Error's text without its backtrace.

#include <c10/util/Exception.h>

#include <exception>
#include <string>

namespace attn::distributed::detail {

inline std::string cause_of(const std::exception& error) {
  const auto* c10_error = dynamic_cast<const c10::Error*>(&error);
  std::string text = c10_error ? c10_error->what_without_backtrace() : error.what();
  const auto newline = text.find('\n');
  return newline == std::string::npos ? text : text.substr(0, newline);
}

}  // namespace attn::distributed::detail
