#include "json_file.h"

#include <fstream>
#include <stdexcept>

namespace attn_apps {

nlohmann::json read_json_file(const std::string& path, const std::string& what) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error(what + " '" + path + "': cannot open it");
  try {
    nlohmann::json j;
    in >> j;
    return j;
  } catch (const nlohmann::json::exception& e) {
    throw std::runtime_error(what + " '" + path + "': not valid JSON: " + e.what());
  }
}

}  // namespace attn_apps
