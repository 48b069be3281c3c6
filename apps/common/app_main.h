#pragma once
// The apps' main(): one place that turns an app's exceptions into its exit status and message.
//   exit 0  the app's own result, or its help text when CommandLine::parse met -h/--help (CLI::CallForHelp)
//   exit 2  UsageError: the message and a pointer to --help
//   exit 1  any other error (c10::Error shown without its C++ backtrace)

#include "command_line.h"

#include <c10/util/Exception.h>
#include <fmt/core.h>

#include <exception>
#include <functional>
#include <string>

namespace attn_apps {

inline int run_main(const char* app, const std::string& help, const std::function<int()>& body) {
  try {
    return body();
  } catch (const CLI::CallForHelp&) {
    fmt::print("{}", help);
    return 0;
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
