// Picks the fused kernels' instruction-set variant once per call, by what the CPU supports and which
// variants this build compiled (ATTN_HAVE_AVX2_KERNELS / ATTN_HAVE_AVX512_KERNELS, set by CMake).

#include "ops/cpu/flash_attention_kernel.h"

#include <atomic>
#include <cstdlib>
#include <cstring>

namespace attn::ops::cpu {
namespace {

Capability detected_capability() {
  Capability best = Capability::Default;
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#ifdef ATTN_HAVE_AVX2_KERNELS
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) best = Capability::Avx2;
#endif
#ifdef ATTN_HAVE_AVX512_KERNELS
  // The set ATen's own AVX512 kernels require.
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq")) {
    best = Capability::Avx512;
  }
#endif
#endif
  // The environment may lower the choice (never raise it past what the CPU has).
  if (const char* env = std::getenv("ATTN_CPU_CAPABILITY")) {
    if (std::strcmp(env, "default") == 0) best = Capability::Default;
    if (std::strcmp(env, "avx2") == 0 && best == Capability::Avx512) best = Capability::Avx2;
  }
  return best;
}

// -1: no override; otherwise a Capability.
std::atomic<int> forced{-1};

}  // namespace

Capability active_capability() {
  static const Capability detected = detected_capability();
  const int f = forced.load();
  if (f >= 0 && f <= static_cast<int>(detected)) return static_cast<Capability>(f);
  return detected;
}

void force_capability(Capability capability) { forced.store(static_cast<int>(capability)); }
void reset_capability() { forced.store(-1); }

const char* capability_name(Capability capability) {
  switch (capability) {
    case Capability::Avx512: return "avx512";
    case Capability::Avx2: return "avx2";
    case Capability::Default: break;
  }
  return "default";
}

namespace {
template <typename Args>
void dispatch_forward(const Args& args) {
  switch (active_capability()) {
#ifdef ATTN_HAVE_AVX512_KERNELS
    case Capability::Avx512: return kernel_avx512::flash_forward(args);
#endif
#ifdef ATTN_HAVE_AVX2_KERNELS
    case Capability::Avx2: return kernel_avx2::flash_forward(args);
#endif
    default: return kernel_default::flash_forward(args);
  }
}

template <typename Args>
void dispatch_backward(const Args& args) {
  switch (active_capability()) {
#ifdef ATTN_HAVE_AVX512_KERNELS
    case Capability::Avx512: return kernel_avx512::flash_backward(args);
#endif
#ifdef ATTN_HAVE_AVX2_KERNELS
    case Capability::Avx2: return kernel_avx2::flash_backward(args);
#endif
    default: return kernel_default::flash_backward(args);
  }
}
template <typename Args>
void dispatch_decode(const Args& args) {
  switch (active_capability()) {
#ifdef ATTN_HAVE_AVX512_KERNELS
    case Capability::Avx512: return kernel_avx512::decode_forward(args);
#endif
#ifdef ATTN_HAVE_AVX2_KERNELS
    case Capability::Avx2: return kernel_avx2::decode_forward(args);
#endif
    default: return kernel_default::decode_forward(args);
  }
}
}  // namespace

void decode_forward(const DecodeArgs<float, float>& args) { dispatch_decode(args); }
void decode_forward(const DecodeArgs<double, double>& args) { dispatch_decode(args); }
void decode_forward(const DecodeArgs<float, c10::BFloat16>& args) { dispatch_decode(args); }
void flash_forward(const FlashForward<float>& args) { dispatch_forward(args); }
void flash_forward(const FlashForward<double>& args) { dispatch_forward(args); }
void flash_backward(const FlashBackward<float>& args) { dispatch_backward(args); }
void flash_backward(const FlashBackward<double>& args) { dispatch_backward(args); }

}  // namespace attn::ops::cpu
