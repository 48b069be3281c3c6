#include "chat_format.h"

#include "json_file.h"

#include <stdexcept>
#include <vector>

namespace attn::models {

std::optional<ChatFormat> ChatFormat::from_file(const std::string& path) {
  const nlohmann::json j = attn_apps::read_json_file(path, "conversion record");
  if (!j.contains("chat") || j["chat"].is_null()) return std::nullopt;
  const auto parts = [&](const char* key, size_t count) {
    const nlohmann::json& chat = j["chat"];
    if (!chat.contains(key) || !chat[key].is_array() || chat[key].size() != count) {
      throw std::runtime_error("conversion record '" + path + "': chat." + key + " is not a list of " +
                               std::to_string(count) + " strings; rerun scripts/convert-gguf.py");
    }
    return chat[key].get<std::vector<std::string>>();
  };
  ChatFormat format;
  const std::vector<std::string> user = parts("user", 2), system = parts("system_user", 3);
  format.user_before_ = user[0];
  format.user_after_ = user[1];
  format.system_before_ = system[0];
  format.system_between_ = system[1];
  format.system_after_ = system[2];
  return format;
}

std::string ChatFormat::prompt(const std::string& user, const std::string& system) const {
  if (system.empty()) return user_before_ + user + user_after_;
  return system_before_ + system + system_between_ + user + system_after_;
}

}  // namespace attn::models
