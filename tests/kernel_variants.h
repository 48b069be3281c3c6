#pragma once
// Running a test once per compiled CPU kernel variant (default, AVX2, AVX-512), so every instruction set's
// code is checked on a machine that has the widest one.

#include "ops/cpu/kernels.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdio>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

namespace attn::test {

/// Forces a kernel variant for its lifetime and restores the detected one afterwards.
class CapabilityScope {
 public:
  explicit CapabilityScope(ops::cpu::Capability c) { ops::cpu::force_capability(c); }
  ~CapabilityScope() { ops::cpu::reset_capability(); }
  CapabilityScope(const CapabilityScope&) = delete;
  CapabilityScope& operator=(const CapabilityScope&) = delete;
};

/// Forces one of bfloat16's own routes for its lifetime: AMX's tiles (`amx`, where the CPU has them) or the
/// pairs (where it has AVX512-BF16); the variant and the AMX setting return to their defaults afterwards.
class Bf16RouteScope {
 public:
  explicit Bf16RouteScope(bool amx) : capability_(ops::cpu::Capability::Avx512Bf16) {
    ops::cpu::force_amx_tiles(amx);
  }
  ~Bf16RouteScope() { ops::cpu::reset_amx_tiles(); }
  Bf16RouteScope(const Bf16RouteScope&) = delete;
  Bf16RouteScope& operator=(const Bf16RouteScope&) = delete;

 private:
  CapabilityScope capability_;
};

/// Forces AMX's tiles on (where the CPU has them) or off for bfloat16, in the variant that is active, for its
/// lifetime.
class AmxTilesScope {
 public:
  explicit AmxTilesScope(bool on) { ops::cpu::force_amx_tiles(on); }
  ~AmxTilesScope() { ops::cpu::reset_amx_tiles(); }
  AmxTilesScope(const AmxTilesScope&) = delete;
  AmxTilesScope& operator=(const AmxTilesScope&) = delete;
};

/// Where this process cannot run AMX's tiles, why; empty where it can. On a machine that has AMX but whose tiles
/// this build or the environment turned off, the calling test fails too: a test leaves an AMX case out only for
/// missing hardware.
inline std::string amx_absence() {
  const ops::cpu::AmxAvailability& a = ops::cpu::amx_availability();
  if (a.available) return {};
  EXPECT_TRUE(a.machine_lacks) << "this machine has AMX, but its cases cannot run: " << a.reason;
  return "no AMX tiles here (" + a.reason + ")";
}

/// amx_absence() as a note in the test's output that says what was left out; true where AMX's tiles run.
inline bool amx_runs_here(const char* left_out) {
  const std::string absence = amx_absence();
  if (absence.empty()) return true;
  std::printf("[ NOTE     ] %s: %s\n", absence.c_str(), left_out);
  return false;
}

/// In a parameterised fixture's SetUp: an AMX case (`amx`) skips, saying why, where this process cannot run AMX's
/// tiles; it has no lower route of its own to stand for.
inline void skip_amx_case_without_tiles(bool amx) {
  if (!amx) return;
  const std::string absence = amx_absence();
  if (!absence.empty()) GTEST_SKIP() << absence << ": the AMX route cannot run here";
}

struct KernelParam {
  ops::cpu::Capability capability;
  torch::Dtype dtype;
  ops::cpu::FloatProducts products = ops::cpu::FloatProducts::Tiles;  // the AVX-512 variant's float products
  bool amx = false;  // bfloat16 on AMX's tiles (capability Avx512Bf16); every other case runs with them off
};

/// How gtest prints a failing case's parameter: "avx2 Float" rather than its bytes.
inline void PrintTo(const KernelParam& p, std::ostream* os) {
  *os << ops::cpu::capability_name(p.capability) << " " << c10::toString(p.dtype)
      << (p.products == ops::cpu::FloatProducts::Blas ? " blas" : "") << (p.amx ? " amx" : "");
}

inline std::string kernel_param_name(const ::testing::TestParamInfo<KernelParam>& info) {
  return std::string(ops::cpu::capability_name(info.param.capability)) + "_" + c10::toString(info.param.dtype) +
         (info.param.products == ops::cpu::FloatProducts::Blas ? "_blas" : "") + (info.param.amx ? "_amx" : "");
}

/// Every variant × float32, float64 and bfloat16, and the bfloat16 route (avx512_bf16), which only bfloat16
/// takes; with `blas_products`, also the AVX-512 variant's float products on BLAS instead of its tiles
/// (float32, and bfloat16 widened); with `amx`, also bfloat16 on AMX's tiles (the fused kernel's products).
inline std::vector<KernelParam> kernel_grid(bool blas_products = false, bool amx = false) {
  std::vector<KernelParam> grid;
  for (auto c : {ops::cpu::Capability::Default, ops::cpu::Capability::Avx2, ops::cpu::Capability::Avx512}) {
    for (torch::Dtype d : {torch::kFloat32, torch::kFloat64, torch::kBFloat16}) grid.push_back({c, d});
  }
  grid.push_back({ops::cpu::Capability::Avx512Bf16, torch::kBFloat16});
  if (amx) grid.push_back({ops::cpu::Capability::Avx512Bf16, torch::kBFloat16, ops::cpu::FloatProducts::Tiles, true});
  for (torch::Dtype d : {torch::kFloat32, torch::kBFloat16}) {
    if (blas_products) grid.push_back({ops::cpu::Capability::Avx512, d, ops::cpu::FloatProducts::Blas});
  }
  return grid;
}

/// A fixture that runs each test under its parameter's kernel variant. A variant this CPU lacks runs as the
/// best one it has; the test records which one actually ran. The AMX case skips where the machine has no AMX
/// tiles (skip_amx_case_without_tiles).
class KernelVariantTest : public ::testing::TestWithParam<KernelParam> {
 protected:
  void SetUp() override {
    skip_amx_case_without_tiles(GetParam().amx);
    if (IsSkipped()) return;
    scope_ = std::make_unique<CapabilityScope>(GetParam().capability);
    ops::cpu::force_float_products(GetParam().products);
    ops::cpu::force_amx_tiles(GetParam().amx);
    RecordProperty("kernel_variant", ops::cpu::capability_name(ops::cpu::active_capability()));
  }
  void TearDown() override {
    scope_.reset();
    ops::cpu::reset_float_products();
    ops::cpu::reset_amx_tiles();
  }

 private:
  std::unique_ptr<CapabilityScope> scope_;
};

}  // namespace attn::test
