#pragma once
// The apps' main(): one place that turns an app's exceptions into its exit status and message.
//   exit 0  the app's own result, or its help text when CommandLine::parse met -h/--help (CLI::CallForHelp)
//   exit 2  UsageError: the message and a pointer to --help
//   exit 1  any other error (c10::Error shown without its C++ backtrace)
//   exit 1  also when what the app printed could not be written (a full disk)
// LibTorch's warnings (TORCH_WARN, attn's included) print as "app: warning: ..." on stderr, not through glog's
// "Logging before InitGoogleLogging" lines on Debian's LibTorch.

#include "command_line.h"

#include <c10/util/Exception.h>
#include <fmt/core.h>
#include <torch/version.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <functional>
#include <iostream>
#include <string>

namespace attn_apps {

/// Prints each LibTorch warning on one line under the app's name. (The handler's signature changed in 2.0.)
class AppWarnings : public c10::WarningHandler {
 public:
  explicit AppWarnings(const char* app) : app_(app) {}
#if TORCH_VERSION_MAJOR >= 2
  using Guard = c10::WarningUtils::WarningHandlerGuard;
  void process(const c10::Warning& warning) override { print(warning.msg()); }
#else
  using Guard = c10::Warning::WarningHandlerGuard;
  void process(const c10::SourceLocation&, const std::string& msg, const bool) override { print(msg); }
#endif

 private:
  void print(const std::string& msg) const { fmt::print(stderr, "{}: warning: {}\n", app_, msg); }
  const char* app_;
};

/// `status`, unless what the app printed could not all be written (a full disk, /dev/full): then 1, with the
/// system's reason, since output that was lost is not a success.
inline int checked_output(const char* app, int status) {
  std::cout.flush();
  if (std::fflush(stdout) != 0) {
    fmt::print(stderr, "{}: error: writing the standard output failed: {}\n", app, std::strerror(errno));
    return 1;
  }
  if (std::ferror(stdout) || !std::cout.good()) {
    fmt::print(stderr, "{}: error: writing the standard output failed\n", app);
    return 1;
  }
  return status;
}

inline int run_main(const char* app, const std::string& help, const std::function<int()>& body) {
  static AppWarnings warnings(app);
  const AppWarnings::Guard use_app_warnings(&warnings);
  try {
    return checked_output(app, body());
  } catch (const CLI::CallForHelp&) {
    try {
      fmt::print("{}", help);  // fmt throws std::system_error where the write fails
    } catch (const std::exception& error) {
      fmt::print(stderr, "{}: error: {}\n", app, error.what());
      return 1;
    }
    return checked_output(app, 0);
  } catch (const UsageError& error) {
    fmt::print(stderr, "{}: error: {}\nTry '{} --help' for more information.\n", app, error.what(), app);
    return 2;
  } catch (const c10::Error& error) {
    fmt::print(stderr, "{}: error: {}\n", app, error.what_without_backtrace());
  } catch (const std::exception& error) {
    fmt::print(stderr, "{}: error: {}\n", app, error.what());
  }
  return 1;
}

}  // namespace attn_apps
