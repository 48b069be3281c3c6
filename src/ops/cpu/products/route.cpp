// The choice of a call's product route (products/route.h). The only place that decides it: the op asks once
// per call, and the kernels follow FlashProblem::route.

#include "ops/cpu/products/route.h"

#include "common/environment.h"
#include "ops/cpu/isa/capability.h"

#ifdef ATTN_HAVE_BF16_DOT
#include "ops/cpu/products/bf16_pairs.h"
#endif

#include <atomic>
#include <cstdlib>
#include <cstring>

namespace attn::ops::cpu {
namespace {

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
      const char* setting = capability_setting();
      t.forced_by_environment = setting && std::strcmp(setting, "avx512_bf16") == 0;
      if (!t.forced_by_environment) t.speed = pair_product_speed();
    }
#endif
    return t;
  }();
  return timing;
}

// -1: no override; otherwise a FloatProducts.
std::atomic<int> forced_products{-1};

bool avx512_variant_active() {
  const Capability active = active_capability();
  return active == Capability::Avx512 || active == Capability::Avx512Bf16;
}

}  // namespace

const char* product_route_name(ProductRoute route) {
  switch (route) {
    case ProductRoute::FloatTiles: return "float tiles";
    case ProductRoute::BfloatPairs: return "bfloat16 pairs";
    case ProductRoute::AmxTiles: return "AMX tiles";
    case ProductRoute::Blas: break;
  }
  return "BLAS";
}

bool bf16_route_chosen() {
  if (capability_forced()) return active_capability() == Capability::Avx512Bf16;
  if (hardware_capability_limit() != Capability::Avx512Bf16) return false;
  const RouteTiming& t = route_timing();
  return t.forced_by_environment || t.speed >= kBf16RouteMargin;
}

double bf16_pair_speed() {
  return hardware_capability_limit() == Capability::Avx512Bf16 ? route_timing().speed : 0.0;
}

FloatProducts float_products() {
  const int f = forced_products.load();
  if (f >= 0) return static_cast<FloatProducts>(f);
  static const FloatProducts chosen = [] {
    const char* env = common::environment_choice("ATTN_FLOAT_PRODUCTS");
    return env && std::strcmp(env, "blas") == 0 ? FloatProducts::Blas : FloatProducts::Tiles;
  }();
  return chosen;
}

void force_float_products(FloatProducts products) { forced_products.store(static_cast<int>(products)); }
void reset_float_products() { forced_products.store(-1); }

namespace {
// -1: no override; 0 off, 1 on.
std::atomic<int> forced_amx{-1};
}  // namespace

const char* amx_route_declined() {
  if (!hardware_has_amx()) return amx_availability().reason.c_str();
  if (active_capability() != Capability::Avx512Bf16) return "a kernel variant below avx512_bf16 is forced";
  const int f = forced_amx.load();
  if (f >= 0) return f == 1 ? nullptr : "forced off (force_amx_tiles)";
  static const bool off = [] {
    const char* env = common::environment_choice("ATTN_AMX");
    return env && std::strcmp(env, "off") == 0;
  }();
  return off ? "ATTN_AMX=off" : nullptr;
}

bool amx_route_chosen() { return amx_route_declined() == nullptr; }

void force_amx_tiles(bool on) { forced_amx.store(on ? 1 : 0); }
void reset_amx_tiles() { forced_amx.store(-1); }

namespace {
// -1: no override; otherwise an Int8Products.
std::atomic<int> forced_int8{-1};
}  // namespace

bool int8_dot_route_chosen() {
  if (!avx512_variant_active() || !hardware_has_int8_dot()) return false;
  const int f = forced_int8.load();
  if (f >= 0) return static_cast<Int8Products>(f) == Int8Products::Dot;
  static const bool widen = [] {
    const char* env = common::environment_choice("ATTN_INT8_PRODUCTS");
    return env && std::strcmp(env, "widen") == 0;
  }();
  return !widen;
}

void force_int8_products(Int8Products products) { forced_int8.store(static_cast<int>(products)); }
void reset_int8_products() { forced_int8.store(-1); }

ProductRoute flash_product_route(at::ScalarType input, bool pairs_fit) {
  if (input == at::kBFloat16 && pairs_fit) {
    if (amx_route_chosen()) return ProductRoute::AmxTiles;
    if (bf16_route_chosen()) return ProductRoute::BfloatPairs;
  }
  if (input == at::kDouble) return ProductRoute::Blas;
  return avx512_variant_active() && float_products() == FloatProducts::Tiles ? ProductRoute::FloatTiles
                                                                              : ProductRoute::Blas;
}

bool linear_rows_take_pairs(at::ScalarType weight) {
  return weight == at::kBFloat16 && active_capability() == Capability::Avx512Bf16;
}

bool linear_rows_take_amx(at::ScalarType weight, int64_t rows) {
  return weight == at::kBFloat16 && rows >= kAmxLinearMinRows && amx_route_chosen();
}

namespace {
// -1: no override; 0 off, 1 on.
std::atomic<int> forced_prefetch{-1};
}  // namespace

bool linear_rows_prefetch_weights(int64_t rows) {
  const int f = forced_prefetch.load();
  if (f >= 0) return f == 1;
  static const int environment = [] {
    const char* env = common::environment_choice("ATTN_WEIGHT_PREFETCH");
    if (env && std::strcmp(env, "on") == 0) return 1;
    if (env && std::strcmp(env, "off") == 0) return 0;
    return -1;
  }();
  if (environment >= 0) return environment == 1;
  return !(rows <= kAmdUnprefetchedRows && hardware_is_amd());
}

void force_weight_prefetch(bool on) { forced_prefetch.store(on ? 1 : 0); }
void reset_weight_prefetch() { forced_prefetch.store(-1); }

bool decode_takes_amx(at::ScalarType query, at::ScalarType cache, int64_t rows) {
  return query == at::kBFloat16 && cache == at::kBFloat16 && rows >= kAmxDecodeMinRows && amx_route_chosen();
}

}  // namespace attn::ops::cpu
