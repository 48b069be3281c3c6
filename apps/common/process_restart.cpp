#include "process_restart.h"

#include "openblas_kernels.h"

#include <unistd.h>

#include <cstdlib>
#include <string>

namespace attn_apps {

void restart_with(char** argv, const RestartSettings& settings) {
  bool changed = false;
  // Each only where unset: the user's choice, or this restart's own setting on the second start.
  const auto set = [&changed](const char* name, const std::string& value) {
    if (value.empty() || std::getenv(name)) return;
    setenv(name, value.c_str(), /*overwrite=*/0);
    changed = true;
  };
  if (settings.fast_openblas) set("OPENBLAS_CORETYPE", better_openblas_coretype());
  if (settings.bounded_spinning && !std::getenv("OMP_WAIT_POLICY")) set("GOMP_SPINCOUNT", "10000");
  if (changed) execv("/proc/self/exe", argv);  // returns only on failure: then run on as we are
}

}  // namespace attn_apps
