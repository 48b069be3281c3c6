// Attention variants against Hugging Face transformers' own attention code (tests/reference/make_variant_references.py,
// run by the 2.x lane's Python): Mistral's sliding window (GQA, a prompt longer than the window, and a decode step
// through its sliding KV cache), Gemma 2's logit softcap with its sliding and full layers, BLOOM's ALiBi (a prompt,
// and a decode step with 12 heads), and GPT-OSS's attention sinks on its full and sliding layers. Output and the
// gradients of q, k, v (and the sinks) for a fixed cotangent, with Backend::Fused and Backend::Math in float32 and
// float64; and attn::alibi_slopes against BLOOM's slopes. Built only where that Python has transformers
// (tests/CMakeLists.txt says which lane).
//
// How transformers' parameters map to attn's options (the script names them as attn does):
//   sliding_window W (q_idx - kv_idx < W, and causal)  ->  causal(true).window(W - 1, 0)
//   Gemma 2 attn_logit_softcapping c, scaling           ->  softcap(c), scale(query_pre_attn_scalar ** -0.5)
//   BLOOM alibi slope * j (build_alibi_tensor), causal   ->  alibi_slopes(slopes), causal(true)
//   GPT-OSS module.sinks                                 ->  sinks(sinks)
// A decode step's keys are the cache's (Tk > Tq): attn's default bottom-right alignment puts the last query on
// the last key, as transformers' q_offset and kv_offset do.

#include "support.h"

#include <algorithm>
#include <string>
#include <vector>

namespace attn::test {
namespace {

const std::string kDir = ATTN_VARIANT_REFERENCE_DIR;

/// float32 runs: the output as the other parity tests (1e-5); the gradients sum over up to 300 keys.
constexpr double kFloat32Tol = 1e-5;
constexpr double kFloat32GradTol = 2e-5;

/// The case's options in attn's terms.
SdpaOptions options_of(const ReferenceCase& c) {
  SdpaOptions o;
  o.causal(c.boolean("causal"))
      .window(c.integer("window_left"), c.integer("window_right"))
      .softcap(c.real("softcap"))
      .scale(c.real("scale"));
  // BLOOM's own slopes (float32, as it computes them); SlopesMatchBloom below checks attn::alibi_slopes against them.
  if (c.has("alibi_slopes")) o.alibi_slopes(c.tensor("alibi_slopes"));
  return o;
}

/// One run: a case, the backend and the dtype attn computes in.
struct VariantRun {
  std::string name;
  Backend backend;
  torch::Dtype dtype;
};

std::string run_name(const VariantRun& r) {
  return r.name + "_" + attn::to_string(r.backend) + (r.dtype == torch::kFloat64 ? "_float64" : "_float32");
}
void PrintTo(const VariantRun& r, std::ostream* os) { *os << run_name(r); }

std::vector<VariantRun> variant_runs() {
  std::vector<VariantRun> runs;
  for (const std::string& name : reference_cases("variant_", kDir)) {
    for (const Backend backend : {Backend::Fused, Backend::Math}) {
      for (const torch::Dtype dtype : {torch::kFloat32, torch::kFloat64}) runs.push_back({name, backend, dtype});
    }
  }
  return runs;
}

class VariantsTransformers : public ::testing::TestWithParam<VariantRun> {};

TEST_P(VariantsTransformers, OutputAndGradientsMatchTheModelsAttention) {
  const VariantRun& run = GetParam();
  const torch::Dtype dtype = run.dtype;
  const ReferenceCase ref(run.name, kDir);
  const auto opts = torch::TensorOptions().dtype(dtype);
  const torch::Tensor q = ref.tensor("q", opts).requires_grad_(true);
  const torch::Tensor k = ref.tensor("k", opts).requires_grad_(true);
  const torch::Tensor v = ref.tensor("v", opts).requires_grad_(true);
  SdpaOptions options = options_of(ref).backend(run.backend);
  torch::Tensor sinks;
  if (ref.has("sinks")) {
    sinks = ref.tensor("sinks", opts).requires_grad_(true);
    options.sinks(sinks);
  }

  const torch::Tensor out = attn::scaled_dot_product_attention(q, k, v, options);
  ASSERT_EQ(out.scalar_type(), dtype);
  out.backward(ref.tensor("grad_output", opts));

  // Mistral, Gemma 2 and BLOOM run their softmax in float32 whatever the input, so their float64 references are
  // float32-accurate; the script says how far (float64_tol) and checks itself against a float64 formula first.
  const bool f64 = dtype == torch::kFloat64;
  const double tol = f64 ? ref.real("float64_tol") : kFloat32Tol;
  const double grad_tol = f64 ? ref.real("float64_tol") : kFloat32GradTol;
  EXPECT_CLOSE(out, ref.tensor("out"), tol);
  EXPECT_CLOSE(q.grad(), ref.tensor("grad_q"), grad_tol);
  EXPECT_CLOSE(k.grad(), ref.tensor("grad_k"), grad_tol);
  EXPECT_CLOSE(v.grad(), ref.tensor("grad_v"), grad_tol);
  if (sinks.defined()) EXPECT_CLOSE(sinks.grad(), ref.tensor("grad_sinks"), grad_tol);
}

INSTANTIATE_TEST_SUITE_P(Cases, VariantsTransformers, ::testing::ValuesIn(variant_runs()),
                         [](const ::testing::TestParamInfo<VariantRun>& info) { return run_name(info.param); });

// The standard slopes against BLOOM's (build_alibi_tensor, float32), for head counts that are powers of two and
// not (8 and 12 are the attention cases').
TEST(VariantsTransformersAlibi, SlopesMatchBloom) {
  const ReferenceCase ref("alibi_slopes", kDir);
  const torch::Tensor heads = ref.tensor("heads");
  ASSERT_GT(heads.numel(), 0);
  for (int64_t i = 0; i < heads.numel(); ++i) {
    const int64_t h = heads[i].item<int64_t>();
    SCOPED_TRACE("heads " + std::to_string(h));
    const torch::Tensor ours = attn::alibi_slopes(h);
    const torch::Tensor bloom = ref.tensor("slopes_" + std::to_string(h));
    ASSERT_EQ(ours.sizes(), bloom.sizes());
    EXPECT_EQ(ours.scalar_type(), torch::kFloat32);
    EXPECT_TRUE(ours.device().is_cpu());
    // Relative to each slope: BLOOM rounds the base 2^(-8/n) to float32 and raises it to the power in float32, so
    // its slopes carry up to ~power x 2^-24 (measured 5.0e-7 at most for these head counts); a wrong or misplaced
    // slope is off by a factor.
    EXPECT_TRUE(torch::allclose(ours.to(torch::kFloat64), bloom.to(torch::kFloat64), /*rtol=*/2e-6, /*atol=*/0.0))
        << "ours " << ours << "\nBLOOM " << bloom;
  }
  for (const int64_t h : {8, 12}) {
    EXPECT_TRUE(heads.eq(h).any().item<bool>()) << h;
  }
}

// Registered from the manifest: if it went missing or short the suite would silently shrink.
TEST(VariantsTransformersCases, EveryVariantIsGenerated) {
  const std::vector<std::string> cases = reference_cases("variant_", kDir);
  for (const char* name : {"variant_mistral_sliding_gqa", "variant_mistral_sliding_decode",
                           "variant_gemma2_softcap_sliding", "variant_gemma2_softcap_full", "variant_bloom_alibi_h8",
                           "variant_bloom_alibi_h12_decode", "variant_gptoss_sinks_full",
                           "variant_gptoss_sinks_sliding"}) {
    EXPECT_NE(std::find(cases.begin(), cases.end(), name), cases.end()) << name;
  }
  EXPECT_FALSE(reference_cases("alibi_slopes", kDir).empty());
}

}  // namespace
}  // namespace attn::test
