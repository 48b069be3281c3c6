#include "json_file.h"

#include <fstream>
#include <stdexcept>

namespace attn_apps {

nlohmann::json read_json_file(const std::string& path, const std::string& what) {
  std::ifstream in(path);
  if (!in) throw json_file_error(what, path, "cannot open it");
  try {
    nlohmann::json j;
    in >> j;
    return j;
  } catch (const nlohmann::json::exception& e) {
    throw json_file_error(what, path, std::string("not valid JSON: ") + e.what());
  }
}

std::runtime_error json_file_error(const std::string& what, const std::string& path, const std::string& message) {
  return std::runtime_error(what + " '" + path + "': " + message);
}

}  // namespace attn_apps
