#pragma once
// The ATTN_* environment settings that force a CPU kernel route: one table of their names, choices and meanings
// (attn::environment_settings() hands it to attn-bench --help; docs/backends.md lists it, and a test checks that
// list against the table), read one way: a value among the setting's choices, or a warning that names them. A
// misspelt setting would otherwise leave a route on without a word.

#include <string>
#include <vector>

namespace attn::common {

struct Setting {
  const char* name;
  std::vector<const char*> choices;
  const char* meaning;  ///< one line, for --help
};

/// Every setting, in the order --help lists them.
const std::vector<Setting>& settings();

/// For each setting of the table that is set (non-empty) to a value outside its choices, the sentence that
/// warns of it: "attn: ATTN_AMX=OFF is not one of on, off; it is ignored".
std::vector<std::string> settings_outside_their_choices();

/// TORCH_WARN of each of settings_outside_their_choices(); environment_choice's first call does this.
void warn_of_settings_outside_their_choices();

/// The value of setting `name` (one of settings()) where it is exactly one of its choices; nullptr where it is
/// unset, empty or another value. The first call in a process warns (TORCH_WARN) of every setting of the table
/// outside its choices, whether or not its route is ever decided on this machine (ATTN_AMX on a CPU without AMX).
const char* environment_choice(const char* name);

}  // namespace attn::common
