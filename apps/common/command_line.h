#pragma once
// Command-line reading shared by the apps: "--name value", "--name=value" and flags, with UsageError for
// anything malformed (the apps print it with a pointer to --help and exit 2).

#include <fmt/core.h>

#include <charconv>
#include <stdexcept>
#include <string>

namespace attn_apps {

struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// Walks argv one option at a time:
///   for (CommandLine args(argc, argv); args.next();)
///     if (args.name() == "--out") out = args.value(); else if (args.name() == "--quiet") quiet = args.flag();
class CommandLine {
 public:
  CommandLine(int argc, char** argv) : argc_(argc), argv_(argv) {}

  /// Moves to the next argument; false when there is none left.
  bool next();
  /// The current argument, without any "=value" part.
  const std::string& name() const { return name_; }
  /// The current option's value: after "=", or the next argument. A missing value (or a next argument that
  /// is itself an option, i.e. a forgotten value) is a UsageError.
  std::string value();
  /// Marks the current option as a flag; "--flag=value" is a UsageError.
  bool flag();
  /// The UsageError for an argument nobody recognised.
  UsageError unknown() const;

 private:
  int argc_;
  char** argv_;
  int index_ = 0;
  std::string name_, inline_value_;
  bool has_inline_value_ = false;
};

/// `text` as an integer in [min, max], or a UsageError naming the option and what was `expected`.
template <typename Int>
Int parse_integer(const std::string& option, const std::string& text, Int min, Int max, const std::string& expected) {
  Int value{};
  const char* end = text.data() + text.size();
  const auto [stop, error] = std::from_chars(text.data(), end, value);
  if (text.empty() || error != std::errc() || stop != end || value < min || value > max)
    throw UsageError(fmt::format("{} expects {}, got '{}'", option, expected, text));
  return value;
}

}  // namespace attn_apps
