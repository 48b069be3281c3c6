// ops/torch_bfloat16_gemm.h from what the CPU has (isa/capability.h).

#include "ops/torch_bfloat16_gemm.h"

#include "ops/cpu/isa/capability.h"

namespace attn::ops {

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

}  // namespace attn::ops
