#pragma once
// The apps' command lines, read by CLI11: "--name value", "--name=value" and flags, with UsageError for
// anything malformed (the apps print it with a pointer to --help and exit 2). Each app keeps its own help text.

#include <CLI/CLI.hpp>
#include <fmt/core.h>

#include <charconv>
#include <functional>
#include <stdexcept>
#include <string>

namespace attn_apps {

struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// A CLI::App that calls each option's handler as soon as the option is read, so that the first mistake on
/// the line is the one reported, and that stops at -h/--help:
///   CommandLine command_line;
///   command_line.add_option("--out", [&](const std::string& value) { out = value; });
///   command_line.add_flag("--quiet", [&] { quiet = true; });
///   command_line.parse(argc, argv);
class CommandLine {
 public:
  CommandLine();

  /// "--name VALUE" or "--name=VALUE". A missing VALUE, or one that starts with "--" (the value forgotten and
  /// the next option taken for it), is a UsageError.
  void add_option(const std::string& name, std::function<void(const std::string& value)> on_value);
  /// "--name FILE" read by the app; an empty FILE, one that does not exist and a folder are UsageErrors, found
  /// before any work ("-", stdin where the app reads it, is left to the app).
  void add_file_option(const std::string& name, std::string& file);
  /// "--name DIR", a folder the app reads files from (checked by the app, which knows what belongs there); an
  /// empty DIR is a UsageError.
  void add_folder_option(const std::string& name, std::string& folder);
  /// "--name FILE" that the app writes at the end of its run: an empty FILE, or a folder that does not exist or
  /// cannot be written, is a UsageError at once, before any work.
  void add_output_file_option(const std::string& name, std::string& file);
  /// "--name" alone; "--name=VALUE" is a UsageError (but for "--name=" and "--name=true", which CLI11 reads as
  /// "--name").
  void add_flag(const std::string& name, std::function<void()> on_flag);

  /// Reads the arguments, calling the handlers in their order. Throws UsageError, or CLI::CallForHelp at -h or
  /// --help without reading what follows (help wins over anything after it; run_main prints the help text).
  void parse(int argc, char** argv);

 private:
  /// CLI11 collects the arguments no option claims; the first of them, if any, is a UsageError. Called before
  /// each handler too, so that an unknown argument is reported before any mistake after it.
  void reject_unrecognised() const;

  CLI::App app_;
};

/// `text` as a decimal integer in [min, max], or a UsageError naming the option and what was `expected`.
/// (Not CLI11's conversion: it reads "010" as octal and "0x10" as hex, and wraps "-1" around for unsigned.)
template <typename Int>
Int parse_integer(const std::string& option, const std::string& text, Int min, Int max, const std::string& expected) {
  Int value{};
  const char* end = text.data() + text.size();
  const auto [stop, error] = std::from_chars(text.data(), end, value);
  if (text.empty() || error != std::errc() || stop != end || value < min || value > max)
    throw UsageError(fmt::format("{} expects {}, got '{}'", option, expected, text));
  return value;
}

/// `text` as a finite decimal number in [min, max], or a UsageError naming the option and what was `expected`.
double parse_real(const std::string& option, const std::string& text, double min, double max, const std::string& expected);

}  // namespace attn_apps
