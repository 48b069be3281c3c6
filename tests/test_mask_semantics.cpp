// One definition of which (query, key) pairs are blocked: src/backends/masks.h. Every path that computes
// attention must agree with it: the Math, Torch and Fused backends, and the TorchScript export's forward
// (src/jit/torchscript/attention.py), which is written separately in TorchScript.
//
// With value = identity ([Tk, Tk]), a head's output row i is its probability row P[i, :]. So each path's
// output shows which keys it let through: P[i, j] must be exactly 0 where masks.h says blocked, and > 0
// where it says allowed (the scores are moderate, so no allowed exp() underflows); a row with some allowed
// key sums to 1, and a row with none is all zeros.

#include "support.h"

#include "backends/masks.h"

#include <attn/jit/export.h>

#include <optional>

namespace attn::test {
namespace {

struct MaskCase {
  int64_t tq, tk;
  std::optional<CausalAlignment> causal;
  bool padding, attend, additive;
};

std::string case_name(const ::testing::TestParamInfo<MaskCase>& info) {
  const MaskCase& c = info.param;
  std::string name = "q" + std::to_string(c.tq) + "_k" + std::to_string(c.tk);
  if (c.causal) name += *c.causal == CausalAlignment::TopLeft ? "_causal_top_left" : "_causal_bottom_right";
  if (c.padding) name += "_padding";
  if (c.attend) name += "_attend";
  if (c.additive) name += "_additive";
  return name;
}

void PrintTo(const MaskCase& c, std::ostream* os) { *os << case_name({c, 0}); }

class MaskSemantics : public ::testing::TestWithParam<MaskCase> {};

TEST_P(MaskSemantics, EveryPathBlocksExactlyThePairsMasksDefines) {
  const MaskCase& c = GetParam();
  const int64_t batch = 3;
  const auto f64 = torch::TensorOptions().dtype(torch::kFloat64);
  for (int seed = 0; seed < 4; ++seed) {
    torch::manual_seed(1000 * seed + c.tq * 10 + c.tk);
    // Random masks, dense enough that some rows end up with no key at all.
    AttentionMasks masks;
    if (c.padding) masks.key_padding_mask(torch::rand({batch, c.tk}) < 0.3);
    if (c.attend) masks.attend_mask(torch::rand({batch, 1, c.tq, c.tk}) < 0.7);
    if (c.additive) {
      torch::Tensor add = torch::rand({c.tq, c.tk}, f64) * 4 - 2;
      masks.additive_mask(add.masked_fill(torch::rand({c.tq, c.tk}) < 0.25, -INFINITY));
    }

    // The definition, on the functional core's layout: padding [B, 1, Tk], the others as given.
    AttentionMasks functional = masks;
    if (c.padding) functional.key_padding_mask(masks.key_padding_mask().view({batch, 1, c.tk}));
    torch::Tensor blocked = backends::blocked_pairs(functional, c.causal, c.tq, c.tk, torch::kCPU);
    blocked = blocked.defined() ? blocked.expand({batch, 1, c.tq, c.tk}).squeeze(1)
                                : torch::zeros({batch, c.tq, c.tk}, torch::kBool);
    const torch::Tensor no_keys = blocked.all(-1);

    // A head whose value projection is the identity, fed the identity as keys and values.
    AttentionHeadOptions options(/*d_in=*/c.tk, /*d_k=*/4);
    options.d_v(c.tk).causal(c.causal.has_value()).causal_alignment(c.causal.value_or(CausalAlignment::BottomRight));
    AttentionHead head(options);
    head->to(torch::kFloat64);
    {
      torch::NoGradGuard no_grad;
      head->v_proj->weight.copy_(torch::eye(c.tk, f64));
    }
    const torch::Tensor x = torch::randn({batch, c.tq, c.tk}, f64);
    const torch::Tensor kv = torch::eye(c.tk, f64).expand({batch, c.tk, c.tk});

    std::vector<std::pair<std::string, torch::Tensor>> paths;
    for (Backend backend : {Backend::Math, Backend::Torch, Backend::Fused}) {
      head->options.backend(backend);
      paths.emplace_back(to_string(backend), head->forward(x, kv, kv, masks));
    }
    head->options.backend(Backend::Auto);
    torch::jit::Module exported = jit::to_torchscript(*head);
    const auto optional = [](const torch::Tensor& t) { return t.defined() ? c10::IValue(t) : c10::IValue(); };
    paths.emplace_back("TorchScript", exported
                                          .forward({x, kv, kv, optional(masks.key_padding_mask()),
                                                    optional(masks.attend_mask()), optional(masks.additive_mask())})
                                          .toTensor());

    for (const auto& [path, probs] : paths) {
      SCOPED_TRACE(path + ", seed " + std::to_string(seed));
      ASSERT_EQ(probs.sizes(), blocked.sizes());
      EXPECT_TRUE(probs.masked_select(blocked).eq(0).all().item<bool>()) << "a blocked pair got weight";
      EXPECT_TRUE(probs.masked_select(blocked.logical_not()).gt(0).all().item<bool>())
          << "an allowed pair got no weight";
      const torch::Tensor sums = probs.sum(-1);
      EXPECT_TRUE(sums.masked_select(no_keys).eq(0).all().item<bool>()) << "a query with no key got weight";
      EXPECT_TRUE(torch::allclose(sums.masked_select(no_keys.logical_not()),
                                  torch::ones({}, f64), /*rtol=*/0, /*atol=*/1e-12));
    }
  }
}

std::vector<MaskCase> mask_cases() {
  std::vector<MaskCase> cases;
  const std::optional<CausalAlignment> causal_modes[] = {std::nullopt, CausalAlignment::BottomRight,
                                                         CausalAlignment::TopLeft};
  for (auto [tq, tk] : {std::pair<int64_t, int64_t>{6, 6}, {4, 9}, {9, 4}}) {
    for (const auto& causal : causal_modes) {
      cases.push_back({tq, tk, causal, true, true, true});
      cases.push_back({tq, tk, causal, true, false, false});
      cases.push_back({tq, tk, causal, false, true, false});
      cases.push_back({tq, tk, causal, false, false, true});
    }
    cases.push_back({tq, tk, CausalAlignment::BottomRight, false, false, false});
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(RandomMasks, MaskSemantics, ::testing::ValuesIn(mask_cases()), case_name);

}  // namespace
}  // namespace attn::test
