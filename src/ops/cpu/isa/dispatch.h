#pragma once
// The one switch over instruction-set variants: every kernel entry point (kernels.cpp) runs through it.

#include "ops/cpu/isa/capability.h"
#include "ops/cpu/isa/variants.h"

namespace attn::ops::cpu {

/// Calls `call(Variant{})` with the variant type of active_capability() that this build compiled (AVX-512 for
/// Avx512Bf16 too); `call` calls the kernel it wants as a static member of that type.
template <typename Call>
decltype(auto) on_active_variant(const Call& call) {
  switch (active_capability()) {
#ifdef ATTN_HAVE_AVX512_KERNELS
    case Capability::Avx512Bf16:
    case Capability::Avx512: return call(Avx512Variant{});
#endif
#ifdef ATTN_HAVE_AVX2_KERNELS
    case Capability::Avx2: return call(Avx2Variant{});
#endif
    default: return call(DefaultVariant{});
  }
}

}  // namespace attn::ops::cpu
