#pragma once
// Running a test once per compiled CPU kernel variant (default, AVX2, AVX-512), so every instruction set's
// code is checked on a machine that has the widest one.

#include "ops/cpu/flash_attention_kernel.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

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

struct KernelParam {
  ops::cpu::Capability capability;
  torch::Dtype dtype;
};

/// How gtest prints a failing case's parameter: "avx2 Float" rather than its bytes.
inline void PrintTo(const KernelParam& p, std::ostream* os) {
  *os << ops::cpu::capability_name(p.capability) << " " << c10::toString(p.dtype);
}

inline std::string kernel_param_name(const ::testing::TestParamInfo<KernelParam>& info) {
  return std::string(ops::cpu::capability_name(info.param.capability)) + "_" + c10::toString(info.param.dtype);
}

/// Every variant × float32, float64 and bfloat16, and the bfloat16 route (avx512_bf16), which only
/// bfloat16 takes.
inline std::vector<KernelParam> kernel_grid() {
  std::vector<KernelParam> grid;
  for (auto c : {ops::cpu::Capability::Default, ops::cpu::Capability::Avx2, ops::cpu::Capability::Avx512}) {
    for (torch::Dtype d : {torch::kFloat32, torch::kFloat64, torch::kBFloat16}) grid.push_back({c, d});
  }
  grid.push_back({ops::cpu::Capability::Avx512Bf16, torch::kBFloat16});
  return grid;
}

/// A fixture that runs each test under its parameter's kernel variant. A variant this CPU lacks runs as the
/// best one it has; the test records which one actually ran.
class KernelVariantTest : public ::testing::TestWithParam<KernelParam> {
 protected:
  void SetUp() override {
    scope_ = std::make_unique<CapabilityScope>(GetParam().capability);
    RecordProperty("kernel_variant", ops::cpu::capability_name(ops::cpu::active_capability()));
  }
  void TearDown() override { scope_.reset(); }

 private:
  std::unique_ptr<CapabilityScope> scope_;
};

}  // namespace attn::test
