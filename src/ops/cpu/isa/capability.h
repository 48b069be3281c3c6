#pragma once
// What this CPU can run, asked in one place (isa/capability.cpp): the instruction-set variant the kernels take.
// Tests force each variant; isa/dispatch.h runs the active one.

#include <string>

namespace attn::ops::cpu {

/// The instruction sets the kernels are compiled for. Avx512Bf16 runs the AVX-512 variant on a CPU that also
/// has AVX512-BF16, where bfloat16 may take its own product route (products/route.h).
enum class Capability { Default, Avx2, Avx512, Avx512Bf16 };

/// The variant that runs: the widest this CPU and build support, or a lower one forced. ATTN_CPU_CAPABILITY=
/// default|avx2|avx512 lowers it.
Capability active_capability();
/// The widest this CPU and build support (after ATTN_CPU_CAPABILITY).
Capability hardware_capability_limit();
/// ATTN_CPU_CAPABILITY's value, read once: "default", "avx2", "avx512" or "avx512_bf16" (which takes the
/// bfloat16 pairs without measuring them, products/route.h); nullptr where unset or not one of those.
const char* capability_setting();
/// Forces a capability up to hardware_capability_limit() (tests run every variant); `reset_capability()`
/// undoes it.
void force_capability(Capability capability);
void reset_capability();
/// Whether a capability this CPU supports is forced.
bool capability_forced();
const char* capability_name(Capability capability);
/// Whether this CPU and build have AVX512-VNNI's int16 dot products (products/int8_dot.h), whatever variant is
/// active.
bool hardware_has_int8_dot();
/// Whether this CPU and build have AMX's bfloat16 tile products (products/amx_panels.h) and Linux lets this
/// process use the tiles: the first call asks for the tile state (arch_prctl ARCH_REQ_XCOMP_PERM), once per
/// process; a refusal (an older kernel, a hypervisor that hides the state) makes this false, never a crash.
/// amx_availability() says why not. A test build that emulates the tiles (ATTN_AMX_EMULATION) has them wherever
/// the AVX-512 variant with AVX512-BF16 runs.
bool hardware_has_amx();
/// hardware_has_amx(), and where it is false, why: the first of the CPU without AMX, an OS or hypervisor that
/// has not enabled the tile state, a build without AMX kernels, a CPU without AVX512-BF16 or ATTN_CPU_CAPABILITY
/// below avx512_bf16, and Linux refusing the tile state (with its error).
struct AmxAvailability {
  bool available = false;
  /// Whether the CPU lists AMX's bfloat16 tiles (CPUID), whether or not they can run.
  bool cpu_lists = false;
  /// Whether the reason is the machine's (its CPU, OS, hypervisor or kernel) rather than this build's or the
  /// environment's: tests may skip an AMX case only for the machine's.
  bool machine_lacks = true;
  std::string reason;  ///< empty where available
  /// Whether this is a test build whose tile instructions run in software (CMake's ATTN_AMX_EMULATION,
  /// products/amx_emulation.h): available then on a CPU with AVX512-BF16, AMX or not.
  bool emulated = false;
};
const AmxAvailability& amx_availability();
/// Whether the CPU lists AMX's bfloat16 tiles (CPUID) and the OS has enabled their state (XCR0's XTILECFG and
/// XTILEDATA), whatever this build compiled and ATTN_CPU_CAPABILITY say: where oneDNN, under LibTorch's bfloat16
/// GEMM, multiplies on them (ops/torch_bfloat16_gemm.h). A hypervisor that hides AMX clears either.
bool amx_state_enabled();
/// Whether this CPU has AVX-512's core set (F, BW, VL, DQ), whatever this build compiled and
/// ATTN_CPU_CAPABILITY say: what the AVX-512 variant needs, as ATen's own AVX-512 kernels do, and what LibTorch
/// asks for before it multiplies bfloat16 matrices on oneDNN (ops/torch_bfloat16_gemm.h).
bool hardware_has_avx512_core();
/// Whether this CPU has AVX512-BF16's instructions, whatever this build compiled and ATTN_CPU_CAPABILITY say.
bool hardware_has_avx512_bf16();
/// Whether this CPU is AMD's (CPUID's vendor), for the choices that measured differently there
/// (products/route.h).
bool hardware_is_amd();

}  // namespace attn::ops::cpu
