// ops/torch_bfloat16_gemm.h from what the CPU has (isa/capability.h) and how fast its pairs are (products/route.h).

#include "ops/torch_bfloat16_gemm.h"

#include "common/environment.h"
#include "ops/cpu/isa/capability.h"
#include "ops/cpu/products/route.h"

#include <atomic>
#include <cstdlib>
#include <cstring>

namespace attn::ops {
namespace {
// -1: no override; 0 native, 1 trails.
std::atomic<int> forced_trails{-1};
}  // namespace

bool torch_multiplies_bfloat16_natively() {
#if defined(__x86_64__) || defined(__i386__)
  return cpu::hardware_has_avx512_core();
#else
  return true;
#endif
}

bool torch_bfloat16_gemm_is_emulated() {
  // On x86 LibTorch's oneDNN product is the one it runs on AVX-512's core set; off x86 both are false.
  return cpu::hardware_has_avx512_core() && !cpu::hardware_has_avx512_bf16();
}

bool torch_bfloat16_gemm_trails_float() {
  const int f = forced_trails.load();
  if (f >= 0) return f == 1;
  static const bool trails = [] {
    const char* env = common::environment_choice("ATTN_BF16_GEMM");
    if (env && std::strcmp(env, "widen") == 0) return true;
    if (env && std::strcmp(env, "native") == 0) return false;
    if (!cpu::hardware_has_avx512_core() || !cpu::hardware_has_avx512_bf16() || cpu::amx_state_enabled()) {
      return false;
    }
    // 0 where the probe did not run (ATTN_CPU_CAPABILITY below avx512_bf16, or forcing the route): unknown.
    const double speed = cpu::bf16_pair_speed();
    return speed > 0.0 && speed < kBfloat16GemmTrailsBelow;
  }();
  return trails;
}

void force_torch_bfloat16_gemm_trails_float(bool trails) { forced_trails.store(trails ? 1 : 0); }
void reset_torch_bfloat16_gemm_trails_float() { forced_trails.store(-1); }

}  // namespace attn::ops
