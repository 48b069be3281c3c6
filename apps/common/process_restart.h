#pragma once
// Settings that libraries read once, when they load, before main(): OpenBLAS's kernel set (openblas_kernels.h)
// and how long OpenMP's threads spin. An app that needs them starts itself again, once, with them set in its
// environment, leaving any the user set as they are.

namespace attn_apps {

struct RestartSettings {
  /// OPENBLAS_CORETYPE where the process's OpenBLAS runs generic kernels (better_openblas_coretype()).
  bool fast_openblas = true;
  /// GOMP_SPINCOUNT=10000 (unless OMP_WAIT_POLICY or GOMP_SPINCOUNT is set): the threads spin a while between
  /// parallel regions, then sleep. A decoding step is some 180 short regions (SmolLM2: 30 layers, about six
  /// each) with serial work between them, and threads that fall asleep in those gaps wake late (a bound of 1000
  /// cost an Intel Xeon guest a quarter of its decode speed); but threads that spin on (OMP_WAIT_POLICY=ACTIVE,
  /// or libgomp's default 300,000 spins) take the cores from a thread that other processes' work has
  /// descheduled, and every region waits for it. On 2 cores beside three busy loops, SmolLM2's decode ran 2-3x
  /// faster with this bound than spinning on, and on idle cores as fast (bench/RESULTS.md).
  bool bounded_spinning = false;
};

/// Sets the settings asked for that the environment lacks and, if it set any, replaces the process with itself
/// (the same arguments). Returns only when there is nothing to set or the restart failed.
void restart_with(char** argv, const RestartSettings& settings);

}  // namespace attn_apps
