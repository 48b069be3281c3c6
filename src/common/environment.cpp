#include "common/environment.h"

#include <c10/util/Exception.h>

#include <cstdlib>
#include <cstring>
#include <string>

namespace attn::common {

const char* environment_choice(const char* name, std::initializer_list<const char*> choices) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return nullptr;
  std::string listed;
  for (const char* choice : choices) {
    if (std::strcmp(value, choice) == 0) return choice;
    listed += listed.empty() ? choice : std::string(", ") + choice;
  }
  // Each caller reads its setting once (a static), so this warns once per setting.
  TORCH_WARN("attn: ", name, "=", value, " is not one of ", listed, "; it is ignored");
  return nullptr;
}

}  // namespace attn::common
