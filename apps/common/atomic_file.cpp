#include "atomic_file.h"

#include <fmt/core.h>

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <stdexcept>

namespace attn_apps {

void write_file_atomically(const std::string& path, const std::string& contents) {
  // The process id keeps two runs writing the same target from sharing a temporary file.
  const std::string tmp = fmt::format("{}.tmp.{}", path, getpid());
  std::FILE* file = std::fopen(tmp.c_str(), "wb");
  if (!file) throw std::runtime_error(fmt::format("cannot open '{}' for writing: {}", tmp, std::strerror(errno)));
  const bool written = std::fwrite(contents.data(), 1, contents.size(), file) == contents.size();
  const int write_errno = errno;
  const bool closed = std::fclose(file) == 0;  // fclose flushes: a full disk may only show up here
  if (!written || !closed) {
    const int error = written ? errno : write_errno;
    std::remove(tmp.c_str());
    throw std::runtime_error(fmt::format("write failed for '{}': {}", tmp, std::strerror(error)));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int error = errno;
    std::remove(tmp.c_str());
    throw std::runtime_error(fmt::format("cannot rename '{}' to '{}': {}", tmp, path, std::strerror(error)));
  }
}

}  // namespace attn_apps
