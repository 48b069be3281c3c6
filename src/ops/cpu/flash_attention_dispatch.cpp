// Picks the fused kernels' instruction-set variant once per call, by what the CPU supports and which
// variants this build compiled (ATTN_HAVE_AVX2_KERNELS / ATTN_HAVE_AVX512_KERNELS / ATTN_HAVE_BF16_DOT, set
// by CMake). The bfloat16 route is taken where the CPU has AVX512-BF16 and a measurement at the first
// bfloat16 call says that its pair product clearly outruns the float FMA (kBf16RouteMargin). The AVX-512
// variant's float products run on attn's register tiles unless ATTN_FLOAT_PRODUCTS=blas.

#include "ops/cpu/flash_attention_kernel.h"

#include <c10/util/Exception.h>

#ifdef ATTN_HAVE_BF16_DOT
#include "ops/cpu/bf16_gemm.h"
#endif

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>

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
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq")) {
    best = Capability::Avx512;
#ifdef ATTN_HAVE_BF16_DOT
    if (__builtin_cpu_supports("avx512bf16")) best = Capability::Avx512Bf16;
#endif
  }
#endif
#endif
  // The environment may lower the choice (never raise it past what the CPU has).
  if (const char* env = std::getenv("ATTN_CPU_CAPABILITY")) {
    if (std::strcmp(env, "default") == 0) best = Capability::Default;
    if (std::strcmp(env, "avx2") == 0 && best >= Capability::Avx512) best = Capability::Avx2;
    if (std::strcmp(env, "avx512") == 0 && best == Capability::Avx512Bf16) best = Capability::Avx512;
  }
  return best;
}

/// AVX512-BF16's measured speed (pair_product_speed), once per process; 0 where it cannot run or was not
/// measured.
struct RouteTiming {
  double speed = 0.0;
  bool forced_by_environment = false;  // ATTN_CPU_CAPABILITY=avx512_bf16: the route without measuring
};

const RouteTiming& route_timing() {
  static const RouteTiming timing = [] {
    RouteTiming t;
#ifdef ATTN_HAVE_BF16_DOT
    if (hardware_capability_limit() == Capability::Avx512Bf16) {
      const char* env = std::getenv("ATTN_CPU_CAPABILITY");
      t.forced_by_environment = env && std::strcmp(env, "avx512_bf16") == 0;
      if (!t.forced_by_environment) t.speed = pair_product_speed();
    }
#endif
    return t;
  }();
  return timing;
}

// -1: no override; otherwise a Capability.
std::atomic<int> forced{-1};

/// The forced capability, if one is set that this CPU supports; -1 otherwise.
int forced_within_limit() {
  const int f = forced.load();
  return f >= 0 && f <= static_cast<int>(hardware_capability_limit()) ? f : -1;
}

}  // namespace

Capability hardware_capability_limit() {
  static const Capability limit = detect_hardware();
  return limit;
}

Capability active_capability() {
  const int f = forced_within_limit();
  return f >= 0 ? static_cast<Capability>(f) : hardware_capability_limit();
}

bool bf16_route_chosen() {
  const int f = forced_within_limit();
  if (f >= 0) return f == static_cast<int>(Capability::Avx512Bf16);
  if (hardware_capability_limit() != Capability::Avx512Bf16) return false;
  const RouteTiming& t = route_timing();
  return t.forced_by_environment || t.speed >= kBf16RouteMargin;
}

double bf16_pair_speed() {
  return hardware_capability_limit() == Capability::Avx512Bf16 ? route_timing().speed : 0.0;
}

namespace {
// -1: no override; otherwise a FloatProducts.
std::atomic<int> forced_products{-1};
}  // namespace

FloatProducts float_products() {
  const int f = forced_products.load();
  if (f >= 0) return static_cast<FloatProducts>(f);
  static const FloatProducts chosen = [] {
    const char* env = std::getenv("ATTN_FLOAT_PRODUCTS");
    return env && std::strcmp(env, "blas") == 0 ? FloatProducts::Blas : FloatProducts::Tiles;
  }();
  return chosen;
}

void force_float_products(FloatProducts products) { forced_products.store(static_cast<int>(products)); }
void reset_float_products() { forced_products.store(-1); }

void force_capability(Capability capability) { forced.store(static_cast<int>(capability)); }
void reset_capability() { forced.store(-1); }

const char* capability_name(Capability capability) {
  switch (capability) {
    case Capability::Avx512Bf16: return "avx512_bf16";
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
    case Capability::Avx512Bf16:
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
    case Capability::Avx512Bf16:
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
    case Capability::Avx512Bf16:
    case Capability::Avx512: return kernel_avx512::decode_forward(args);
#endif
#ifdef ATTN_HAVE_AVX2_KERNELS
    case Capability::Avx2: return kernel_avx2::decode_forward(args);
#endif
    default: return kernel_default::decode_forward(args);
  }
}
template <typename Args>
void dispatch_linear_rows(const Args& args) {
  switch (active_capability()) {
#ifdef ATTN_HAVE_AVX512_KERNELS
    case Capability::Avx512Bf16:
    case Capability::Avx512: return kernel_avx512::linear_rows(args);
#endif
#ifdef ATTN_HAVE_AVX2_KERNELS
    case Capability::Avx2: return kernel_avx2::linear_rows(args);
#endif
    default: return kernel_default::linear_rows(args);
  }
}
}  // namespace

void softcap_values(float* x, int64_t n, float cap, float* tanh_out) {
  switch (active_capability()) {
#ifdef ATTN_HAVE_AVX512_KERNELS
    case Capability::Avx512Bf16:
    case Capability::Avx512: return kernel_avx512::softcap_values(x, n, cap, tanh_out);
#endif
#ifdef ATTN_HAVE_AVX2_KERNELS
    case Capability::Avx2: return kernel_avx2::softcap_values(x, n, cap, tanh_out);
#endif
    default: return kernel_default::softcap_values(x, n, cap, tanh_out);
  }
}

void decode_forward(const DecodeArgs<float, float>& args) { dispatch_decode(args); }
void decode_forward(const DecodeArgs<double, double>& args) { dispatch_decode(args); }
void decode_forward(const DecodeArgs<float, c10::BFloat16>& args) { dispatch_decode(args); }
void linear_rows(const LinearRowsArgs<float>& args) { dispatch_linear_rows(args); }
void linear_rows(const LinearRowsArgs<c10::BFloat16>& args) {
#if defined(ATTN_HAVE_AVX512_KERNELS) && defined(ATTN_HAVE_BF16_DOT)
  // Memory-bound, so the pair product pays wherever it exists, without the bfloat16 route's speed probe.
  if (active_capability() == Capability::Avx512Bf16) return kernel_avx512::linear_rows_pairs(args);
#endif
  dispatch_linear_rows(args);
}
void flash_forward(const FlashForward<float>& args) { dispatch_forward(args); }
void flash_forward(const FlashForward<double>& args) { dispatch_forward(args); }
void flash_backward(const FlashBackward<float>& args) { dispatch_backward(args); }
void flash_backward(const FlashBackward<double>& args) { dispatch_backward(args); }
namespace {
void require_bf16_route() {
  TORCH_CHECK(hardware_capability_limit() == Capability::Avx512Bf16,
              "attn: the bfloat16 route needs AVX512-BF16, and this CPU or build has ",
              capability_name(hardware_capability_limit()));
}
}  // namespace

void flash_forward(const FlashForward<float, c10::BFloat16>& args) {
  require_bf16_route();
  // Q's rows are read in pairs along d_k.
  TORCH_INTERNAL_ASSERT(args.problem.dk % 2 == 0, "the bfloat16 route needs an even d_k, got ", args.problem.dk);
#ifdef ATTN_HAVE_AVX512_KERNELS
  kernel_avx512::flash_forward(args);
#endif
}
void flash_backward(const FlashBackward<float, c10::BFloat16>& args) {
  require_bf16_route();
  // Q's and dO's rows are read in pairs along d_k and d_v.
  TORCH_INTERNAL_ASSERT(args.problem.dk % 2 == 0 && args.problem.dv % 2 == 0,
                        "the bfloat16 route's backward needs an even d_k and d_v, got ", args.problem.dk, " and ",
                        args.problem.dv);
#ifdef ATTN_HAVE_AVX512_KERNELS
  kernel_avx512::flash_backward(args);
#endif
}

}  // namespace attn::ops::cpu
