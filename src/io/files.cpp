// Reading whole weight files and telling their formats apart; writing any file atomically (attn/io/files.h).

#include <attn/io/files.h>

#include "io/formats.h"

#include <c10/util/Exception.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <utility>

namespace attn::io::detail {

std::ifstream open_regular_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  TORCH_CHECK(in, "attn::io: cannot open '", path, "' for reading: ", std::strerror(errno));
  // A directory opens as a stream on Linux and reports a nonsense size: check what the path is first.
  std::error_code error;
  TORCH_CHECK(std::filesystem::is_regular_file(path, error), "attn::io: '", path, "' is not a regular file");
  TORCH_CHECK(in.tellg() >= 0, "attn::io: cannot read '", path, "'");
  return in;
}

std::vector<uint8_t> read_file(const std::string& path) {
  std::ifstream in = open_regular_file(path);
  const std::streamoff size = in.tellg();
  std::vector<uint8_t> bytes(static_cast<size_t>(size));
  in.seekg(0);
  TORCH_CHECK(in.read(reinterpret_cast<char*>(bytes.data()), size), "attn::io: reading '", path, "' failed");
  return bytes;
}

std::vector<uint8_t> read_file_start(const std::string& path, size_t n) {
  std::ifstream in = open_regular_file(path);
  std::vector<uint8_t> bytes(std::min<size_t>(n, static_cast<size_t>(in.tellg())));
  in.seekg(0);
  TORCH_CHECK(in.read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(bytes.size())),
              "attn::io: reading '", path, "' failed");
  return bytes;
}

WeightFormat detect_format(const std::vector<uint8_t>& bytes, const std::string& path) {
  if (bytes.size() >= 4 && std::memcmp(bytes.data(), "PK\x03\x04", 4) == 0) return WeightFormat::TorchZip;
  if (bytes.size() >= 2 && bytes[0] == 0x80 && bytes[1] <= 5) return WeightFormat::TorchLegacy;  // pickle PROTO
  if (bytes.size() >= 9 && bytes[8] == '{') return WeightFormat::Safetensors;
  TORCH_CHECK(false, "attn::io: ", path,
              " is not a weight file attn can read: expected a torch.save file (zip or legacy) or safetensors");
}

}  // namespace attn::io::detail

namespace attn::io {
namespace {

/// The file that writing `path` replaces: a symbolic link's target, so that the link stays a link.
std::string replaced_file(const std::string& path) {
  std::error_code error;
  if (!std::filesystem::is_symlink(path, error)) return path;
  const std::filesystem::path target = std::filesystem::weakly_canonical(path, error);
  return error ? path : target.string();
}

/// A new, empty file next to `target` (same directory, hence same file system), created exclusively: no file
/// of the user's, and no other thread's temporary, is ever reused. It gets `replaced_mode`, the permissions of
/// the file it replaces, or a new file's under the umask where there is none. Returns its descriptor and name.
std::pair<int, std::string> create_temporary(const std::string& target, std::optional<mode_t> replaced_mode) {
  static std::atomic<uint64_t> counter{0};
  for (int attempt = 0;; ++attempt) {
    const std::string tmp = target + ".tmp." + std::to_string(getpid()) + "." + std::to_string(counter++);
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd >= 0) {
      if (replaced_mode && ::fchmod(fd, *replaced_mode & 07777) != 0) {
        const int error = errno;
        ::close(fd);
        std::remove(tmp.c_str());
        TORCH_CHECK(false, "attn::io: cannot give '", tmp, "' the permissions of '", target, "': ",
                    std::strerror(error));
      }
      return {fd, tmp};
    }
    TORCH_CHECK(errno == EEXIST && attempt < 1000, "attn::io: cannot write '", target,
                "': opening its temporary file '", tmp, "' failed: ", std::strerror(errno));
  }
}

/// All of `contents` to `fd`, or the errno of the write that failed.
int write_all(int fd, const std::string& contents) {
  const char* data = contents.data();
  size_t left = contents.size();
  while (left > 0) {
    const ssize_t n = ::write(fd, data, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return n < 0 ? errno : EIO;
    data += n;
    left -= static_cast<size_t>(n);
  }
  return 0;
}

/// Writes into a file that is not a regular one (a device such as /dev/null, a FIFO) where it is: renaming a
/// new file over it would replace the device node or the pipe.
void write_in_place(const std::string& target, const std::string& contents) {
  const int fd = ::open(target.c_str(), O_WRONLY | O_CLOEXEC);
  TORCH_CHECK(fd >= 0, "attn::io: cannot open '", target, "' for writing: ", std::strerror(errno));
  int error = write_all(fd, contents);
  if (::close(fd) != 0 && error == 0) error = errno;
  TORCH_CHECK(error == 0, "attn::io: writing '", target, "' failed: ", std::strerror(error));
}

}  // namespace

void write_file_atomically(const std::string& path, const std::string& contents) {
  const std::string target = replaced_file(path);
  struct stat existing {};
  const bool exists = ::stat(target.c_str(), &existing) == 0;
  if (exists && !S_ISREG(existing.st_mode) && !S_ISDIR(existing.st_mode)) {
    write_in_place(target, contents);
    return;
  }
  const bool replaces = exists && S_ISREG(existing.st_mode);
  const auto [fd, tmp] = create_temporary(target, replaces ? std::optional<mode_t>(existing.st_mode) : std::nullopt);
  int error = write_all(fd, contents);
  if (::close(fd) != 0 && error == 0) error = errno;  // a full disk may only show up here
  if (error != 0) {
    std::remove(tmp.c_str());
    TORCH_CHECK(false, "attn::io: writing '", tmp, "' failed: ", std::strerror(error));
  }
  if (std::rename(tmp.c_str(), target.c_str()) != 0) {
    error = errno;
    std::remove(tmp.c_str());
    TORCH_CHECK(false, "attn::io: cannot rename '", tmp, "' to '", target, "': ", std::strerror(error));
  }
}

}  // namespace attn::io
