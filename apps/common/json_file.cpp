#include "json_file.h"

#include <cmath>
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

int64_t positive_integer(const nlohmann::json& j, const char* key, const std::string& what, const std::string& path) {
  if (!j.contains(key)) throw json_file_error(what, path, std::string("no '") + key + "' field");
  const nlohmann::json& value = j.at(key);
  if (!value.is_number_integer() || value.get<int64_t>() <= 0) {
    throw json_file_error(what, path, std::string(key) + " must be a positive integer, got " + value.dump());
  }
  return value.get<int64_t>();
}

double positive_number(const nlohmann::json& j, const char* key, std::optional<double> fallback,
                       const std::string& what, const std::string& path) {
  if (!j.contains(key) || j.at(key).is_null()) {
    if (fallback) return *fallback;
    throw json_file_error(what, path, std::string("no '") + key + "' field");
  }
  const nlohmann::json& value = j.at(key);
  if (!value.is_number() || !std::isfinite(value.get<double>()) || value.get<double>() <= 0) {
    throw json_file_error(what, path, std::string(key) + " must be a positive number, got " + value.dump());
  }
  return value.get<double>();
}

}  // namespace attn_apps
