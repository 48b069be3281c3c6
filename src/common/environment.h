#pragma once
// The ATTN_* environment settings (docs/backends.md lists them), read one way: a value among the setting's
// choices, or a warning that names them. A misspelt setting would otherwise leave a route on without a word.

#include <initializer_list>

namespace attn::common {

/// The value of environment variable `name` where it is exactly one of `choices`; nullptr where it is unset or
/// empty. Any other value warns (TORCH_WARN, naming the setting, its value and its choices) and counts as unset;
/// callers read each setting once per process, so it warns once.
const char* environment_choice(const char* name, std::initializer_list<const char*> choices);

}  // namespace attn::common
