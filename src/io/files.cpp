// Reading whole weight files and telling their formats apart; writing any file atomically (attn/io/files.h).

#include <attn/io/files.h>

#include "io/formats.h"

#include <c10/util/Exception.h>

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

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

void write_file_atomically(const std::string& path, const std::string& contents) {
  // Next to the target, so that rename() stays on one file system; the pid keeps concurrent writers apart.
  const std::string tmp = path + ".tmp." + std::to_string(getpid());
  std::FILE* file = std::fopen(tmp.c_str(), "wb");
  TORCH_CHECK(file, "attn::io: cannot write '", path, "': opening its temporary file '", tmp, "' failed: ",
              std::strerror(errno));
  const bool written = std::fwrite(contents.data(), 1, contents.size(), file) == contents.size();
  const int write_errno = errno;
  const bool closed = std::fclose(file) == 0;  // fclose flushes: a full disk may only show up here
  if (!written || !closed) {
    const int error = written ? errno : write_errno;
    std::remove(tmp.c_str());
    TORCH_CHECK(false, "attn::io: writing '", tmp, "' failed: ", std::strerror(error));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int error = errno;
    std::remove(tmp.c_str());
    TORCH_CHECK(false, "attn::io: cannot rename '", tmp, "' to '", path, "': ", std::strerror(error));
  }
}

}  // namespace attn::io
