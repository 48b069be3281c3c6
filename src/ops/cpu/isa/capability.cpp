// Detects the widest instruction-set variant this CPU and build support: the only place that asks the CPU.
// CMake says which variants this build compiled (ATTN_HAVE_AVX2_KERNELS, ATTN_HAVE_AVX512_KERNELS,
// ATTN_HAVE_BF16_DOT, ATTN_HAVE_INT8_DOT, ATTN_HAVE_AMX).

#include "ops/cpu/isa/capability.h"

#include "common/environment.h"

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>

#if defined(__linux__) && defined(__GNUC__) && defined(__x86_64__)
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace attn::ops::cpu {
namespace {

/// The widest variant that this CPU and build support; ATTN_CPU_CAPABILITY may lower it.
Capability detect_hardware() {
  Capability best = Capability::Default;
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#ifdef ATTN_HAVE_AVX2_KERNELS
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) best = Capability::Avx2;
#endif
#ifdef ATTN_HAVE_AVX512_KERNELS
  // The set ATen's own AVX512 kernels require.
  if (hardware_has_avx512_core()) {
    best = Capability::Avx512;
#ifdef ATTN_HAVE_BF16_DOT
    if (hardware_has_avx512_bf16()) best = Capability::Avx512Bf16;
#endif
  }
#endif
#endif
  // The environment may lower the choice (never raise it past what the CPU has).
  if (const char* env = capability_setting()) {
    if (std::strcmp(env, "default") == 0) best = Capability::Default;
    if (std::strcmp(env, "avx2") == 0 && best >= Capability::Avx512) best = Capability::Avx2;
    if (std::strcmp(env, "avx512") == 0 && best == Capability::Avx512Bf16) best = Capability::Avx512;
  }
  return best;
}

// -1: no override; otherwise a Capability.
std::atomic<int> forced{-1};

/// The forced capability, if one is set that this CPU supports; -1 otherwise.
int forced_within_limit() {
  const int f = forced.load();
  return f >= 0 && f <= static_cast<int>(hardware_capability_limit()) ? f : -1;
}

}  // namespace

const char* capability_setting() {
  static const char* const setting = common::environment_choice("ATTN_CPU_CAPABILITY");
  return setting;
}

Capability hardware_capability_limit() {
  static const Capability limit = detect_hardware();
  return limit;
}

Capability active_capability() {
  const int f = forced_within_limit();
  return f >= 0 ? static_cast<Capability>(f) : hardware_capability_limit();
}

bool capability_forced() { return forced_within_limit() >= 0; }

void force_capability(Capability capability) { forced.store(static_cast<int>(capability)); }
void reset_capability() { forced.store(-1); }

bool hardware_has_int8_dot() {
#if defined(ATTN_HAVE_INT8_DOT) && defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
  static const bool has = __builtin_cpu_supports("avx512vnni");
  return has;
#else
  return false;
#endif
}

namespace {

/// Whether the CPU lists AMX's bfloat16 tiles (CPUID leaf 7: AMX-BF16 and AMX-TILE).
[[maybe_unused]] bool cpu_lists_amx() {
#if defined(__linux__) && defined(__GNUC__) && defined(__x86_64__)
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) return false;
  return ((edx >> 22) & 1u) && ((edx >> 24) & 1u);
#else
  return false;
#endif
}

AmxAvailability find_amx_availability() {
  AmxAvailability a;
#if defined(ATTN_AMX_EMULATION) && defined(ATTN_HAVE_AMX)
  // A test build: the tiles are software, so only the variant they run in is needed, and no tile state.
  a.emulated = true;
  a.cpu_lists = cpu_lists_amx();
  if (hardware_capability_limit() != Capability::Avx512Bf16) {
    a.machine_lacks = !(hardware_has_avx512_core() && hardware_has_avx512_bf16());
    a.reason = a.machine_lacks ? "this CPU lacks AVX-512 (F, BW, VL, DQ) with AVX512-BF16, which the emulated AMX "
                                 "route's softmax and packing need"
                               : "ATTN_CPU_CAPABILITY lowered the kernels below avx512_bf16";
    return a;
  }
  a.available = true;
  a.machine_lacks = false;
  return a;
#elif defined(__linux__) && defined(__GNUC__) && defined(__x86_64__)
  if (!cpu_lists_amx()) {
    a.reason = "this CPU lists no AMX-BF16 and AMX-TILE in CPUID";
    return a;
  }
  a.cpu_lists = true;
  if (!amx_state_enabled()) {
    a.reason = "the CPU has AMX, but its operating system or hypervisor has not enabled the tile state (XCR0)";
    return a;
  }
#ifndef ATTN_HAVE_AMX
  a.machine_lacks = false;
  a.reason = "the CPU has AMX, but this build of attn has no AMX kernels (its compiler lacks -mamx-tile -mamx-bf16)";
  return a;
#else
  // The AMX route runs on the AVX-512 variant with AVX512-BF16 (its softmax and packing).
  if (hardware_capability_limit() != Capability::Avx512Bf16) {
    a.machine_lacks = !(hardware_has_avx512_core() && hardware_has_avx512_bf16());
    a.reason = a.machine_lacks ? "the CPU has AMX but not AVX-512 (F, BW, VL, DQ) with AVX512-BF16, which the AMX "
                                 "route's softmax and packing need"
                               : "the CPU has AMX, but ATTN_CPU_CAPABILITY lowered the kernels below avx512_bf16";
    return a;
  }
  // Linux hands out the 8 KiB tile state on request only (since 5.16): without it the first tile instruction
  // faults. A refusal is reported here and the kernels take another route.
  constexpr long kArchReqXcompPerm = 0x1023;
  constexpr long kXfeatureXtiledata = 18;
  if (syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) != 0) {
    const int error = errno;
    a.reason = std::string("the CPU has AMX, but Linux refused this process the tile state (arch_prctl "
                           "ARCH_REQ_XCOMP_PERM: ") + std::strerror(error) + ")";
    return a;
  }
  a.available = true;
  a.machine_lacks = false;
  return a;
#endif
#else
  a.reason = "attn uses AMX on x86-64 Linux only";
  return a;
#endif
}

}  // namespace

const AmxAvailability& amx_availability() {
  static const AmxAvailability availability = find_amx_availability();
  return availability;
}

bool hardware_has_amx() { return amx_availability().available; }

bool amx_state_enabled() {
#if defined(__linux__) && defined(__GNUC__) && defined(__x86_64__)
  static const bool has = [] {
    if (!cpu_lists_amx()) return false;
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx) || !((ecx >> 27) & 1u)) return false;  // OSXSAVE: XGETBV works
    unsigned xcr0_low = 0, xcr0_high = 0;
    __asm__ volatile("xgetbv" : "=a"(xcr0_low), "=d"(xcr0_high) : "c"(0));
    constexpr unsigned kTileState = (1u << 17) | (1u << 18);  // XTILECFG, XTILEDATA
    return (xcr0_low & kTileState) == kTileState;
  }();
  return has;
#else
  return false;
#endif
}

bool hardware_has_avx512_core() {
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
  static const bool has = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                          __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
  return has;
#else
  return false;
#endif
}

bool hardware_has_avx512_bf16() {
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
  static const bool has = __builtin_cpu_supports("avx512bf16");
  return has;
#else
  return false;
#endif
}

bool hardware_is_amd() {
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
  static const bool amd = __builtin_cpu_is("amd");
  return amd;
#else
  return false;
#endif
}

const char* capability_name(Capability capability) {
  switch (capability) {
    case Capability::Avx512Bf16: return "avx512_bf16";
    case Capability::Avx512: return "avx512";
    case Capability::Avx2: return "avx2";
    case Capability::Default: break;
  }
  return "default";
}

}  // namespace attn::ops::cpu
