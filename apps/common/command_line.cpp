#include "command_line.h"

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <utility>
#include <vector>

#include <unistd.h>

namespace attn_apps {
namespace {

// An argument as the messages name it: an option without its "=value".
std::string option_name(const std::string& argument) {
  return argument.rfind("--", 0) == 0 ? argument.substr(0, argument.find('=')) : argument;
}

}  // namespace

CommandLine::CommandLine() {
  app_.set_help_flag();  // each app has its own help text, which run_main prints
  app_.allow_extras();   // reported by reject_unrecognised, in order with the other mistakes
  add_flag("-h,--help", [] { throw CLI::CallForHelp(); });
}

void CommandLine::add_option(const std::string& name, std::function<void(const std::string& value)> on_value) {
  const auto read = [this, name, on_value = std::move(on_value)](const std::string& value) {
    reject_unrecognised();
    // CLI11 takes the argument after the option as its value, whatever it is: "--..." is the next option.
    if (value.rfind("--", 0) == 0) throw UsageError(fmt::format("option '{}' needs a value", name));
    on_value(value);
  };
  app_.add_option_function<std::string>(name, read)->trigger_on_parse();
}

void CommandLine::add_file_option(const std::string& name, std::string& file) {
  add_option(name, [name, &file](const std::string& value) {
    if (value.empty()) throw UsageError(fmt::format("{} needs a file name", name));
    if (value != "-") {
      std::error_code error;
      const std::filesystem::file_status status = std::filesystem::status(value, error);
      if (status.type() == std::filesystem::file_type::not_found) {
        throw UsageError(fmt::format("{} {}: no such file", name, value));
      }
      if (status.type() == std::filesystem::file_type::directory) {
        throw UsageError(fmt::format("{} {}: that is a folder; name a file", name, value));
      }
    }
    file = value;
  });
}

void CommandLine::add_folder_option(const std::string& name, std::string& folder) {
  add_option(name, [name, &folder](const std::string& value) {
    if (value.empty()) throw UsageError(fmt::format("{} needs a folder", name));
    folder = value;
  });
}

void CommandLine::add_output_file_option(const std::string& name, std::string& file) {
  add_option(name, [name, &file](const std::string& value) {
    if (value.empty()) throw UsageError(fmt::format("{} needs a file name", name));
    std::error_code folder_error;
    if (std::filesystem::path(value).filename().empty() || std::filesystem::is_directory(value, folder_error)) {
      throw UsageError(fmt::format("{} {}: that is a folder; name a file (e.g. {})", name, value,
                                   (std::filesystem::path(value) / "out").lexically_normal().string()));
    }
    const std::filesystem::path parent = std::filesystem::path(value).parent_path();
    const std::filesystem::path folder = parent.empty() ? std::filesystem::path(".") : parent;
    std::error_code error;
    const bool is_folder = std::filesystem::is_directory(folder, error);
    if (error && error != std::errc::no_such_file_or_directory) {
      throw UsageError(fmt::format("{} {}: cannot reach the folder '{}': {}", name, value, folder.string(),
                                   error.message()));
    }
    if (!is_folder) {
      throw UsageError(fmt::format("{} {}: the folder '{}' does not exist", name, value, folder.string()));
    }
    // A device or FIFO is written where it is: it must take writes itself, and the folder needs none.
    const std::filesystem::file_status target = std::filesystem::status(value, error);
    if (std::filesystem::exists(target) && !std::filesystem::is_regular_file(target)) {
      if (access(value.c_str(), W_OK) != 0) {
        throw UsageError(fmt::format("{} {}: cannot write to it: {}", name, value, std::strerror(errno)));
      }
    } else {
      // Anything else is written as a new file beside the target, then renamed (attn::io::write_file_atomically),
      // so the folder must take a new file; access() would not say so (/proc, /sys, a read-only bind mount as
      // root pass it), a file made and removed does.
      std::string probe = (folder / ".attn-write-check-XXXXXX").string();
      const int fd = mkstemp(probe.data());
      if (fd < 0) {
        throw UsageError(fmt::format("{} {}: cannot create files in the folder '{}': {}", name, value,
                                     folder.string(), std::strerror(errno)));
      }
      close(fd);
      unlink(probe.c_str());
    }
    file = value;
  });
}

void CommandLine::add_flag(const std::string& name, std::function<void()> on_flag) {
  CLI::Option* flag = app_.add_flag_callback(name, std::move(on_flag));
  // Runs before the callback. CLI11 records a bare flag as "true" and would read "--flag=0" as false; the
  // apps' flags take no value.
  flag->each([this, flag](const std::string& value) {
    reject_unrecognised();
    if (value != "true") throw UsageError(fmt::format("option '{}' takes no value", flag->get_name()));
  });
  flag->trigger_on_parse();
}

void CommandLine::parse(int argc, char** argv) {
  try {
    app_.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    throw;  // not a mistake: for run_main
  } catch (const CLI::ArgumentMismatch&) {
    // The one mismatch these options can have: the line ended before the last option's value.
    reject_unrecognised();
    throw UsageError(fmt::format("option '{}' needs a value", option_name(argv[argc - 1])));
  } catch (const CLI::ParseError& error) {  // any other complaint of CLI11's is a usage error too
    throw UsageError(error.what());
  }
  reject_unrecognised();
}

void CommandLine::reject_unrecognised() const {
  const std::vector<std::string> unrecognised = app_.remaining();  // remaining_size() would not count "--"
  if (unrecognised.empty()) return;
  const std::string& argument = unrecognised.front();
  throw UsageError(argument.rfind('-', 0) == 0 ? fmt::format("unknown option '{}'", option_name(argument))
                                               : fmt::format("unexpected argument '{}'", argument));
}

double parse_real(const std::string& option, const std::string& text, double min, double max, const std::string& expected) {
  char* stop = nullptr;
  errno = 0;
  const double value = text.empty() || std::isspace(static_cast<unsigned char>(text[0])) ? 0.0 : std::strtod(text.c_str(), &stop);
  if (text.empty() || stop != text.c_str() + text.size() || errno == ERANGE || !std::isfinite(value) || value < min || value > max)
    throw UsageError(fmt::format("{} expects {}, got '{}'", option, expected, text));
  return value;
}

}  // namespace attn_apps
