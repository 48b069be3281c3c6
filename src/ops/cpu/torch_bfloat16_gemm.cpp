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

}  // namespace attn::ops
