#pragma once
// Settings that libraries read once, when they load, before main(): OpenBLAS's kernel set (openblas_kernels.h)
// and OpenMP's wait policy. An app that needs them starts itself again, once, with them set in its environment,
// leaving any the user set as they are.

namespace attn_apps {

struct RestartSettings {
  /// OPENBLAS_CORETYPE where the process's OpenBLAS runs generic kernels (better_openblas_coretype()).
  bool fast_openblas = true;
  /// OMP_WAIT_POLICY=ACTIVE: the threads spin between parallel regions instead of sleeping. A decoding step is
  /// some 180 short regions (SmolLM2: 30 layers, about six each) with serial work between them; threads that fall
  /// asleep in those gaps wake late (SmolLM2's bfloat16 decode: 2-4 % slower, bench/RESULTS.md). The cost: idle
  /// threads keep their cores busy.
  bool spinning_threads = false;
};

/// Sets the settings asked for that the environment lacks and, if it set any, replaces the process with itself
/// (the same arguments). Returns only when there is nothing to set or the restart failed.
void restart_with(char** argv, const RestartSettings& settings);

}  // namespace attn_apps
