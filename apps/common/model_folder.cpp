#include "model_folder.h"

#include <fmt/core.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <stdexcept>
#include <utility>

namespace attn_apps {

ModelFolder::ModelFolder(std::string dir, std::string not_a_folder, std::string missing_file)
    : dir_(std::move(dir)), missing_file_(std::move(missing_file)) {
  struct stat info {};
  if (::stat(dir_.c_str(), &info) != 0) {
    throw std::runtime_error(fmt::format("--model {}: {}", dir_, std::strerror(errno)));
  }
  if (!S_ISDIR(info.st_mode)) throw std::runtime_error(fmt::format("--model {}: not a folder; {}", dir_, not_a_folder));
}

bool ModelFolder::has(const std::string& name) const { return std::ifstream(dir_ + "/" + name).good(); }

std::string ModelFolder::file(const std::string& name) const {
  if (!has(name)) throw std::runtime_error(fmt::format("--model {}: no {} there; {}", dir_, name, missing_file_));
  return dir_ + "/" + name;
}

}  // namespace attn_apps
