// Rotary embeddings against Hugging Face transformers (tests/reference/make_transformers_references.py, run by
// the 2.x lane's Python): the rope init function of every scaling type (default, linear, dynamic, yarn,
// llama3), the rotary modules and apply_rotary_pos_emb of Llama (half split), GPT-NeoX (partial rotary) and
// GPT-J (interleaved). Built only where that Python has transformers (tests/CMakeLists.txt says which lane).

#include "support.h"

#include <attn/modules/rotary_embedding.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <vector>

namespace attn::test {
namespace {

const std::string kDir = ATTN_TRANSFORMERS_REFERENCE_DIR;

RotaryScaling scaling_named(const std::string& name) {
  static const std::map<std::string, RotaryScaling> names = {{"None", RotaryScaling::None},
                                                             {"Linear", RotaryScaling::Linear},
                                                             {"DynamicNTK", RotaryScaling::DynamicNTK},
                                                             {"YaRN", RotaryScaling::YaRN},
                                                             {"Llama3", RotaryScaling::Llama3}};
  return names.at(name);
}

/// The case's configuration in attn's options (the script names them as attn does).
RotaryEmbeddingOptions options_of(const ReferenceCase& c) {
  RotaryEmbeddingOptions o(c.integer("rotary_dim"));
  o.base(c.real("base"))
      .pairing(c.text("pairing") == "Interleaved" ? RotaryPairing::Interleaved : RotaryPairing::HalfSplit)
      .scaling(scaling_named(c.text("scaling")));
  if (c.has("factor")) o.factor(c.real("factor"));
  if (c.has("original_max_position")) o.original_max_position(c.integer("original_max_position"));
  if (c.has("beta_fast")) o.beta_fast(c.real("beta_fast")).beta_slow(c.real("beta_slow"));
  if (c.has("yarn_attention_factor")) o.attention_factor(c.real("yarn_attention_factor"));
  if (c.has("low_freq_factor")) o.low_freq_factor(c.real("low_freq_factor")).high_freq_factor(c.real("high_freq_factor"));
  return o;
}

class RotaryTransformers : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override { ref_ = std::make_unique<ReferenceCase>(GetParam(), kDir); }
  const ReferenceCase& ref() const { return *ref_; }
  std::unique_ptr<ReferenceCase> ref_;
};

// The rope init function: inverse frequencies (transformers computes them in float32) and the attention factor.
TEST_P(RotaryTransformers, FrequenciesMatchTheRopeInitFunction) {
  const RotaryFrequencies f = rotary_frequencies(options_of(ref()), ref().integer("seq_len"));
  EXPECT_CLOSE(f.inv_freq, ref().tensor("inv_freq").to(torch::kFloat64), 1e-6);
  EXPECT_NEAR(f.attention_factor, ref().real("attention_factor"), 1e-12);
}

// The rotation alone, in float64, with the same cos and sin: apply_rotary against the model's
// apply_rotary_pos_emb (pairing, partial rotary, pass-through channels).
TEST_P(RotaryTransformers, RotationMatchesApplyRotaryPosEmbInFloat64) {
  const torch::Tensor cos = ref().tensor("cos64").unsqueeze(1), sin = ref().tensor("sin64").unsqueeze(1);
  const RotaryPairing pairing = options_of(ref()).pairing();
  EXPECT_CLOSE(apply_rotary(ref().tensor("q64"), cos, sin, pairing), ref().tensor("q64_embed"), 1e-12);
}

// End to end in float32: attn::RotaryEmbedding at the case's positions ([B, T], one offset per row) against the
// model's rotary module and apply_rotary_pos_emb, on q and on k (fewer heads). transformers forms the angles
// position · inv_freq in float32, attn in float64, so the tolerance grows with the largest angle (2 float32
// roundings of it).
TEST_P(RotaryTransformers, ModuleMatchesTheModelsRotaryInFloat32) {
  RotaryEmbedding rotary(options_of(ref()));
  const torch::Tensor positions = ref().tensor("positions");
  const double largest_angle = positions.max().item<double>();  // inv_freq[0] is 1 (or less)
  const double tol = 2e-6 + 2.0 * largest_angle * std::ldexp(1.0, -24);
  EXPECT_CLOSE(rotary(ref().tensor("q"), positions), ref().tensor("q_embed"), tol);
  EXPECT_CLOSE(rotary(ref().tensor("k"), positions), ref().tensor("k_embed"), tol);
}

INSTANTIATE_TEST_SUITE_P(Cases, RotaryTransformers, ::testing::ValuesIn(reference_cases("rope_", kDir)),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

// Registered from the manifest: if it went missing or short the suite would silently shrink.
TEST(RotaryTransformersCases, EveryTypeAndPairingIsGenerated) {
  const std::vector<std::string> cases = reference_cases("rope_", kDir);
  for (const char* name : {"rope_default", "rope_linear", "rope_dynamic", "rope_yarn", "rope_yarn_betas",
                           "rope_llama3", "rope_neox_partial", "rope_gptj_interleaved"}) {
    EXPECT_NE(std::find(cases.begin(), cases.end(), name), cases.end()) << name;
  }
}

}  // namespace
}  // namespace attn::test
