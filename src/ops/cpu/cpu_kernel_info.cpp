// attn::cpu_kernel_info (<attn/cpu_kernel_info.h>): what the CPU kernels' choices (ops/cpu/isa/capability.h,
// ops/cpu/products/route.h) come to on this machine, in the public header's words.

#include <attn/cpu_kernel_info.h>

#include "common/environment.h"
#include "ops/cpu/isa/capability.h"
#include "ops/cpu/products/route.h"
#include "ops/torch_bfloat16_gemm.h"

#include <cstdio>

namespace attn {

CpuKernelInfo cpu_kernel_info() {
  using ops::cpu::Capability;
  CpuKernelInfo info;
  const Capability active = ops::cpu::active_capability();
  // One reading of the AMX rule, so that the flag and the reason agree.
  const char* amx_declined = ops::cpu::amx_route_declined();
  info.amx_tiles = amx_declined == nullptr;
  info.bfloat16_route = info.amx_tiles || ops::cpu::bf16_route_chosen();
  info.variant = info.bfloat16_route                     ? "avx512_bf16"
                 : active == Capability::Avx512Bf16 ? "avx512"
                                                     : ops::cpu::capability_name(active);
  info.bfloat16_pair_speed = ops::cpu::bf16_pair_speed();
  char measured[64] = "";
  if (info.bfloat16_pair_speed > 0) {
    std::snprintf(measured, sizeof(measured), ": AVX512-BF16 measured %.2fx", info.bfloat16_pair_speed);
  }
  if (amx_declined) info.amx_unused_reason = amx_declined;
  if (info.amx_tiles) {
    info.summary = info.variant + (ops::cpu::amx_availability().emulated
                                       ? " (bfloat16 multiplied on AMX tiles emulated in software: a test build)"
                                       : " (bfloat16 multiplied on AMX tiles)");
  } else if (info.bfloat16_route) {
    info.summary = info.variant + " (bfloat16 multiplied as bfloat16 pairs" + measured + ")";
  } else if (ops::cpu::hardware_capability_limit() == Capability::Avx512Bf16) {
    info.summary = info.variant + " (bfloat16 widened to float" + measured + ")";
  } else {
    info.summary = info.variant + " (bfloat16 widened to float: no AVX512-BF16)";
  }
  // Only where the CPU has AMX (or a test build emulates it): a machine without it need not say so in every line.
  if (!info.amx_tiles && (ops::cpu::amx_availability().cpu_lists || ops::cpu::amx_availability().emulated)) {
    info.summary += ", AMX tiles unused: " + info.amx_unused_reason;
  }
  const bool tiles = ops::cpu::flash_product_route(at::kFloat, /*pairs_fit=*/true) == ops::cpu::ProductRoute::FloatTiles;
  info.float_products = tiles ? "tiles" : "blas";
  info.summary += info.float_products == "tiles" ? ", float products on attn's tiles" : ", float products on BLAS";
  info.int8_products = ops::cpu::int8_dot_route_chosen() ? "dot" : "widen";
  info.summary += info.int8_products == "dot" ? ", int8 cache on AVX512-VNNI dot products"
                                              : ", int8 cache widened to float";
  info.bfloat16_linear_rows = ops::cpu::linear_rows_take_amx(at::kBFloat16, ops::cpu::kAmxLinearMinRows) ? "amx"
                              : ops::cpu::linear_rows_take_pairs(at::kBFloat16)                       ? "pairs"
                                                                                                      : "widened";
  if (info.bfloat16_linear_rows == "amx") {
    char rows[96];
    std::snprintf(rows, sizeof(rows), ", bfloat16 linear rows on AMX tiles from %lld rows",
                  static_cast<long long>(ops::cpu::kAmxLinearMinRows));
    info.summary += rows;
  }
  info.bfloat16_decode =
      ops::cpu::decode_takes_amx(at::kBFloat16, at::kBFloat16, ops::cpu::kAmxDecodeMinRows) ? "amx" : "widened";
  if (info.bfloat16_decode == "amx") {
    char rows[112];
    std::snprintf(rows, sizeof(rows), ", bfloat16 decode on AMX tiles from %lld query rows per K/V head",
                  static_cast<long long>(ops::cpu::kAmxDecodeMinRows));
    info.summary += rows;
  }
  info.bfloat16_linear = !ops::torch_multiplies_bfloat16_natively()     ? "widened"
                         : ops::torch_bfloat16_gemm_trails_float() ? "widened_many"
                                                                   : "libtorch";
  if (info.bfloat16_linear == "widened") info.summary += ", bfloat16 linear of many rows widened to float GEMM";
  if (info.bfloat16_linear == "widened_many") {
    char rows[112];
    std::snprintf(rows, sizeof(rows), ", bfloat16 linear of %lld or more rows widened to float GEMM",
                  static_cast<long long>(ops::kWidenedGemmMinRows));
    info.summary += rows;
  }
#ifdef _OPENMP
  info.parallel_loops = true;
#else
  info.parallel_loops = false;
  info.summary += ", tile loops on the calling thread (built without OpenMP)";
#endif
  return info;
}

std::vector<EnvironmentSetting> environment_settings() {
  std::vector<EnvironmentSetting> out;
  for (const common::Setting& s : common::settings()) {
    out.push_back({s.name, std::vector<std::string>(s.choices.begin(), s.choices.end()), s.meaning});
  }
  return out;
}

}  // namespace attn
