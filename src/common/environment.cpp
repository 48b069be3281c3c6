#include "common/environment.h"

#include <c10/util/Exception.h>

#include <cstdlib>
#include <cstring>
#include <mutex>

namespace attn::common {

const std::vector<Setting>& settings() {
  static const std::vector<Setting> table = {
      {"ATTN_AMX", {"on", "off"}, "bfloat16 on AMX's tiles, where the CPU has them (default on)"},
      {"ATTN_CPU_CAPABILITY", {"default", "avx2", "avx512", "avx512_bf16"},
       "a lower instruction-set variant (avx512_bf16: the bfloat16 pairs, unmeasured)"},
      {"ATTN_FLOAT_PRODUCTS", {"tiles", "blas"}, "the fused kernel's float products on attn's tiles or on BLAS"},
      {"ATTN_INT8_PRODUCTS", {"dot", "widen"}, "an int8 cache's products on AVX512-VNNI dot products or widened"},
      {"ATTN_BF16_GEMM", {"native", "widen"}, "bfloat16 linear of many rows on LibTorch's bfloat16 GEMM or widened"},
      {"ATTN_WEIGHT_PREFETCH", {"on", "off"}, "attn::linear's few-row kernel prefetching its weights"},
  };
  return table;
}

namespace {

const Setting& setting_named(const char* name) {
  const Setting* found = nullptr;
  for (const Setting& s : settings()) {
    if (std::strcmp(s.name, name) == 0) found = &s;
  }
  TORCH_INTERNAL_ASSERT(found != nullptr, "attn: ", name, " is not in common::settings()");
  return *found;
}

/// The setting's value where it is set and non-empty, else nullptr.
const char* set_value(const Setting& s) {
  const char* value = std::getenv(s.name);
  return value == nullptr || *value == '\0' ? nullptr : value;
}

const char* matching_choice(const Setting& s, const char* value) {
  for (const char* choice : s.choices) {
    if (std::strcmp(value, choice) == 0) return choice;
  }
  return nullptr;
}

}  // namespace

std::vector<std::string> settings_outside_their_choices() {
  std::vector<std::string> sentences;
  for (const Setting& s : settings()) {
    const char* value = set_value(s);
    if (value == nullptr || matching_choice(s, value) != nullptr) continue;
    std::string listed;
    for (const char* choice : s.choices) listed += listed.empty() ? choice : std::string(", ") + choice;
    sentences.push_back(std::string("attn: ") + s.name + "=" + value + " is not one of " + listed + "; it is ignored");
  }
  return sentences;
}

void warn_of_settings_outside_their_choices() {
  for (const std::string& sentence : settings_outside_their_choices()) TORCH_WARN(sentence);
}

const char* environment_choice(const char* name) {
  const Setting& s = setting_named(name);
  static std::once_flag warned;
  std::call_once(warned, warn_of_settings_outside_their_choices);
  const char* value = set_value(s);
  return value == nullptr ? nullptr : matching_choice(s, value);
}

}  // namespace attn::common
