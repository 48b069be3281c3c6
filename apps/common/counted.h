#pragma once
// "1 token", "37 tokens": a count and its noun as the apps print them.

#include <cstdint>
#include <string>

namespace attn_apps {

/// `n` and `noun`, the noun with an "s" unless n is 1 (every noun the apps count takes one).
inline std::string counted(int64_t n, const std::string& noun) {
  return std::to_string(n) + " " + noun + (n == 1 ? "" : "s");
}

}  // namespace attn_apps
