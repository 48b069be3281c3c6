#include "command_line.h"

#include <cstring>

namespace attn_apps {

bool CommandLine::next() {
  if (++index_ >= argc_) return false;
  name_ = argv_[index_];
  has_inline_value_ = false;
  inline_value_.clear();
  const size_t eq = name_.find('=');
  if (name_.rfind("--", 0) == 0 && eq != std::string::npos) {
    inline_value_ = name_.substr(eq + 1);
    name_.resize(eq);
    has_inline_value_ = true;
  }
  return true;
}

std::string CommandLine::value() {
  if (has_inline_value_) return inline_value_;
  if (index_ + 1 >= argc_ || std::strncmp(argv_[index_ + 1], "--", 2) == 0)
    throw UsageError(fmt::format("option '{}' needs a value", name_));
  return argv_[++index_];
}

bool CommandLine::flag() {
  if (has_inline_value_) throw UsageError(fmt::format("option '{}' takes no value", name_));
  return true;
}

UsageError CommandLine::unknown() const {
  return UsageError(!name_.empty() && name_[0] == '-' ? fmt::format("unknown option '{}'", name_)
                                                      : fmt::format("unexpected argument '{}'", name_));
}

}  // namespace attn_apps
