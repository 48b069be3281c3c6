// TorchScript export (attn::jit::to_torchscript): the exported module computes what the C++ module computes,
// for every module kind, option, mask kind and layout, before and after a save/load round trip, and holds the
// same parameters under the same names. Export.WritesFilesForPython also leaves exported modules, inputs and
// expected outputs for tests/python/test_torchscript.py.

#include "support.h"

#include <attn/jit/export.h>

#include <torch/script.h>

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <limits>
#include <random>
#include <sstream>

namespace attn::test {
namespace {

constexpr double kTolerance = 1e-6;

/// max |a - b| over the finite elements; infinity when the shapes differ or the NaN/Inf elements do not sit
/// at the same places with the same values.
double max_difference(const torch::Tensor& a, const torch::Tensor& b) {
  if (a.sizes() != b.sizes() || a.scalar_type() != b.scalar_type()) return std::numeric_limits<double>::infinity();
  const torch::Tensor x = a.detach().to(torch::kDouble), y = b.detach().to(torch::kDouble);
  if (!torch::equal(x.isnan(), y.isnan())) return std::numeric_limits<double>::infinity();
  const torch::Tensor inf_x = x.isinf(), inf_y = y.isinf();
  if (!torch::equal(inf_x, inf_y) || !torch::equal(x.masked_select(inf_x), y.masked_select(inf_y))) {
    return std::numeric_limits<double>::infinity();
  }
  const torch::Tensor finite = x.isfinite();
  if (!finite.any().item<bool>()) return 0.0;
  return (x.masked_select(finite) - y.masked_select(finite)).abs().max().item<double>();
}

/// Like EXPECT_ERROR_CONTAINS, for any std::exception: a failed check inside TorchScript code throws
/// torch::jit::JITException, which is no c10::Error.
#define EXPECT_THROW_CONTAINING(statement, needle)                                                  \
  do {                                                                                              \
    try {                                                                                           \
      statement;                                                                                    \
      ADD_FAILURE() << "expected an error containing \"" << (needle) << "\" from: " #statement;    \
    } catch (const std::exception& error) {                                                         \
      const std::string message = error.what();                                                     \
      EXPECT_NE(message.find(needle), std::string::npos) << "message: " << message;                  \
    }                                                                                               \
  } while (false)

c10::IValue optional(const torch::Tensor& t) { return t.defined() ? c10::IValue(t) : c10::IValue(); }

/// The masks as the trailing forward() arguments of an exported module.
void append_masks(std::vector<c10::IValue>& args, const AttentionMasks& masks) {
  args.push_back(optional(masks.key_padding_mask()));
  args.push_back(optional(masks.attend_mask()));
  args.push_back(optional(masks.additive_mask()));
}

/// A named set of masks for inputs of the given layout (unbatched when batch == 0), including ones that leave
/// a query with no key at all, and -inf in the additive mask.
struct MaskCase {
  std::string name;
  AttentionMasks masks;
  /// Puts NaN/Inf into the key/value inputs at keys that no query may use.
  bool poison = false;
};

std::vector<MaskCase> mask_cases(int64_t batch, int64_t heads, int64_t tq, int64_t tk) {
  const bool batched = batch > 0;
  const int64_t b = batched ? batch : 1;
  auto pad_shape = batched ? std::vector<int64_t>{b, tk} : std::vector<int64_t>{tk};
  torch::Tensor pad = torch::rand(pad_shape) < 0.3;
  pad.select(-1, 0) = false;
  if (batched) {
    pad[b - 1] = true;  // one sequence entirely padding: its queries see nothing
  }
  const auto pair = [&](std::vector<int64_t> lead) {
    lead.push_back(tq);
    lead.push_back(tk);
    return lead;
  };
  torch::Tensor attend2 = torch::rand({tq, tk}) < 0.7;
  attend2[0] = false;  // the first query may attend to nothing
  const auto full_shape = batched ? pair({b, heads}) : pair({heads});
  const auto head_shape = batched ? pair({1, heads}) : pair({heads});
  const auto batch_shape = batched ? pair({b, 1}) : pair({1});
  torch::Tensor attend_full = torch::rand(full_shape) < 0.6;
  torch::Tensor attend_heads = torch::rand(head_shape) < 0.6;
  torch::Tensor attend_batch = torch::rand(batch_shape) < 0.6;
  const auto additive = [&](const std::vector<int64_t>& shape) {
    torch::Tensor m = torch::randn(shape);
    return m.masked_fill(torch::rand(shape) < 0.25, -std::numeric_limits<double>::infinity());
  };
  torch::Tensor add2 = additive({tq, tk});
  add2[tq - 1] = -std::numeric_limits<double>::infinity();  // the last query blocked by -inf alone
  torch::Tensor add_full = additive(full_shape);

  std::vector<MaskCase> cases;
  cases.push_back({"none", {}});
  cases.push_back({"key_padding", AttentionMasks().key_padding_mask(pad)});
  cases.push_back({"attend_2d", AttentionMasks().attend_mask(attend2)});
  cases.push_back({"attend_full", AttentionMasks().attend_mask(attend_full)});
  cases.push_back({"attend_heads", AttentionMasks().attend_mask(attend_heads)});
  cases.push_back({"attend_batch", AttentionMasks().attend_mask(attend_batch)});
  cases.push_back({"additive_2d", AttentionMasks().additive_mask(add2)});
  cases.push_back({"additive_full", AttentionMasks().additive_mask(add_full)});
  cases.push_back({"all", AttentionMasks().key_padding_mask(pad).attend_mask(attend_heads).additive_mask(add2)});
  cases.push_back({"padding_poisoned", AttentionMasks().key_padding_mask(pad), /*poison=*/true});
  cases.push_back({"all_poisoned", AttentionMasks().key_padding_mask(pad).attend_mask(attend2).additive_mask(add_full),
                   /*poison=*/true});
  return cases;
}

/// NaN, +Inf and -Inf at padded keys of x [B, Tk, E] or [Tk, E] (padding [B, Tk] or [Tk]).
torch::Tensor poisoned(const torch::Tensor& x, const torch::Tensor& padding) {
  torch::Tensor out = x.clone();
  const torch::Tensor where = padding.unsqueeze(-1).expand_as(x);
  torch::Tensor noise = torch::full_like(x, std::numeric_limits<double>::quiet_NaN());
  noise.select(-1, 0).fill_(std::numeric_limits<double>::infinity());
  if (x.size(-1) > 1) noise.select(-1, 1).fill_(-std::numeric_limits<double>::infinity());
  return out.masked_scatter(where, noise.masked_select(where));
}

/// What one comparison found, gathered for the log.
struct Tally {
  double worst = 0.0;
  int compared = 0;
  void add(double d) {
    worst = std::max(worst, d);
    ++compared;
  }
};

/// One tally for the modules' default backend (Auto: the fused kernel on the CPU) and one for Backend::Math.
struct Tallies {
  Tally by_backend[2];
  Tally& operator[](Backend b) { return by_backend[b == Backend::Math ? 1 : 0]; }
  void print(const char* module) const {
    std::cout << "[ export ] " << module << ": max |difference| " << by_backend[0].worst << " against backend Auto ("
              << by_backend[0].compared << " comparisons), " << by_backend[1].worst << " against backend Math ("
              << by_backend[1].compared << ")\n";
  }
};

torch::jit::Module round_trip(const torch::jit::Module& m) {
  static int counter = 0;
  const auto path = std::filesystem::temp_directory_path() /
                    ("attn_export_" + std::to_string(getpid()) + "_" + std::to_string(counter++) + ".pt");
  m.save(path.string());
  torch::jit::Module loaded = torch::jit::load(path.string());
  std::filesystem::remove(path);
  return loaded;
}

/// Our module's forward and the export's, on the same inputs: compares the export fresh and after save/load.
void expect_same(const std::string& what, const torch::Tensor& ours, std::vector<c10::IValue> args,
                 std::vector<torch::jit::Module*> exports, Tally& tally) {
  ASSERT_TRUE(ours.isfinite().all().item<bool>()) << what << ": the C++ module gave a non-finite output";
  for (size_t i = 0; i < exports.size(); ++i) {
    const torch::Tensor theirs = exports[i]->forward(args).toTensor();
    const double d = max_difference(ours, theirs);
    tally.add(d);
    EXPECT_LE(d, kTolerance) << what << (i == 0 ? " (exported)" : " (saved and loaded)") << ": shapes "
                             << ours.sizes() << " / " << theirs.sizes();
  }
}

void expect_same_parameters(const torch::nn::Module& ours, const torch::jit::Module& exported) {
  std::vector<std::string> our_names, their_names;
  for (const auto& p : ours.named_parameters()) our_names.push_back(p.key());
  for (const auto& p : exported.named_parameters()) their_names.push_back(p.name);
  ASSERT_EQ(our_names, their_names);
  const auto theirs = exported.named_parameters();
  auto it = theirs.begin();
  for (const auto& p : ours.named_parameters()) {
    EXPECT_TRUE(torch::equal(p.value(), (*it).value)) << p.key();
    EXPECT_EQ(p.value().requires_grad(), (*it).value.requires_grad()) << p.key();
    ++it;
  }
}

CausalAlignment alignment_of(int causal) {
  return causal == 2 ? CausalAlignment::TopLeft : CausalAlignment::BottomRight;
}
const char* causal_name(int causal) { return causal == 0 ? "off" : causal == 1 ? "bottom_right" : "top_left"; }

// Sizes drawn per configuration; Tq > Tk sometimes, so that bottom-right causal leaves queries with no key.
struct Sizes {
  int64_t batch, tq, tk;
};
Sizes draw_sizes(std::mt19937& rng) {
  std::uniform_int_distribution<int64_t> b(1, 3), t(1, 7);
  return {b(rng), t(rng), t(rng)};
}

/// Learned sink logits away from their zero initialisation, so that the export must carry their values.
void randomize_sinks(torch::Tensor& sinks) {
  if (!sinks.defined()) return;
  torch::NoGradGuard no_grad;
  sinks.normal_(0.0, 1.5);
}

TEST(Export, MultiHeadAttentionMatchesTheModule) {
  std::mt19937 rng(2024);
  std::uniform_int_distribution<int64_t> heads_d(1, 3), dim_d(1, 6), width_d(2, 9);
  Tallies tally;
  for (int causal = 0; causal < 3; ++causal) {
    for (bool bias : {true, false}) {
      for (bool projection : {true, false}) {
        torch::manual_seed(static_cast<uint64_t>(rng()));
        const int64_t heads = heads_d(rng);
        const bool explicit_head_dim = rng() % 2;
        const int64_t head_dim = dim_d(rng);
        const int64_t embed = explicit_head_dim ? width_d(rng) : heads * head_dim;
        auto options = MultiHeadAttentionOptions(embed, heads)
                           .kdim(width_d(rng))
                           .vdim(width_d(rng))
                           .bias(bias)
                           .output_projection(projection)
                           .causal(causal != 0)
                           .causal_alignment(alignment_of(causal));
        if (explicit_head_dim) options.head_dim(head_dim);
        // Grouped-query attention in half of the multi-head draws: one K/V head shared by all.
        if (heads > 1 && rng() % 2) options.num_kv_heads(1);
        // A window (either side may be unbounded, -1) in half of the draws, soft-capping in the other half.
        std::uniform_int_distribution<int64_t> side_d(-1, 3);
        const bool windowed = rng() % 2;
        if (windowed) options.window(side_d(rng), side_d(rng));
        if (!windowed) options.softcap(1.5);
        // ALiBi in half of the configurations, learned sinks in those with an output projection.
        options.alibi((causal + static_cast<int>(bias)) % 2 == 0).sinks(projection);
        for (Backend backend : {Backend::Auto, Backend::Math}) {
          MultiHeadAttention mha(options.backend(backend));
          mha->eval();
          randomize_sinks(mha->sinks);
          torch::jit::Module exported = jit::to_torchscript(*mha);
          torch::jit::Module loaded = round_trip(exported);
          expect_same_parameters(*mha, exported);
          expect_same_parameters(*mha, loaded);
          const std::string config = "mha embed=" + std::to_string(embed) + " heads=" + std::to_string(heads) +
                                     " kv_heads=" + std::to_string(mha->num_kv_heads()) +
                                     " kdim=" + std::to_string(options.kdim()) + " vdim=" +
                                     std::to_string(options.vdim()) + " bias=" + std::to_string(bias) +
                                     " projection=" + std::to_string(projection) + " causal=" + causal_name(causal) +
                                     " window=(" + std::to_string(options.window_left()) + "," +
                                     std::to_string(options.window_right()) + ") softcap=" +
                                     std::to_string(options.softcap()) + " alibi=" +
                                     std::to_string(options.alibi()) + " sinks=" + std::to_string(options.sinks()) +
                                     (backend == Backend::Math ? " backend=math" : "");
          const Sizes s = draw_sizes(rng);
          for (bool batched : {true, false}) {
            const auto shape = [&](int64_t t, int64_t e) {
              return batched ? std::vector<int64_t>{s.batch, t, e} : std::vector<int64_t>{t, e};
            };
            const torch::Tensor q = torch::randn(shape(s.tq, embed));
            const torch::Tensor k = torch::randn(shape(s.tk, options.kdim()));
            const torch::Tensor v = torch::randn(shape(s.tk, options.vdim()));
            for (const MaskCase& c : mask_cases(batched ? s.batch : 0, heads, s.tq, s.tk)) {
              torch::Tensor key = k, value = v;
              if (c.poison) {
                key = poisoned(k, c.masks.key_padding_mask());
                value = poisoned(v, c.masks.key_padding_mask());
              }
              const torch::Tensor ours = mha->forward(q, key, value, c.masks);
              std::vector<c10::IValue> args{q, key, value};
              append_masks(args, c.masks);
              expect_same(config + (batched ? " batched " : " unbatched ") + c.name, ours, args,
                          {&exported, &loaded}, tally[backend]);
            }
            // Self-attention: one tensor for query, key and value (the stacked projection).
            auto self_options = options;
            MultiHeadAttention self_mha(self_options.kdim(embed).vdim(embed));
            self_mha->eval();
            randomize_sinks(self_mha->sinks);
            torch::jit::Module self_exported = jit::to_torchscript(*self_mha);
            const torch::Tensor x = torch::randn(shape(s.tq, embed));
            for (const MaskCase& c : mask_cases(batched ? s.batch : 0, heads, s.tq, s.tq)) {
              if (c.poison) continue;
              std::vector<c10::IValue> args{x, x, x};
              append_masks(args, c.masks);
              expect_same(config + " self-attention" + (batched ? " batched " : " unbatched ") + c.name,
                          self_mha->forward(x, x, x, c.masks), args, {&self_exported}, tally[backend]);
            }
          }
        }
      }
    }
  }
  tally.print("MultiHeadAttention");
}

TEST(Export, RefusesTheRotaryOption) {
  MultiHeadAttention mha(MultiHeadAttentionOptions(16, 2).rotary(RotaryEmbeddingOptions(8)));
  EXPECT_ERROR_CONTAINS(jit::to_torchscript(*mha), "the export does not cover MultiHeadAttention's rotary option");
}

TEST(Export, AttentionHeadMatchesTheModule) {
  std::mt19937 rng(77);
  std::uniform_int_distribution<int64_t> width_d(1, 9);
  Tallies tally;
  for (int causal = 0; causal < 3; ++causal) {
    for (bool bias : {true, false}) {
      for (Backend backend : {Backend::Auto, Backend::Math}) {
        torch::manual_seed(static_cast<uint64_t>(rng()));
        const auto options = AttentionHeadOptions(width_d(rng), width_d(rng))
                                 .d_v(width_d(rng))
                                 .bias(bias)
                                 .causal(causal != 0)
                                 .causal_alignment(alignment_of(causal))
                                 .backend(backend);
        AttentionHead head(options);
        head->eval();
        torch::jit::Module exported = jit::to_torchscript(*head);
        torch::jit::Module loaded = round_trip(exported);
        expect_same_parameters(*head, exported);
        expect_same_parameters(*head, loaded);
        const std::string config = "head d_in=" + std::to_string(options.d_in()) + " d_k=" +
                                   std::to_string(options.d_k()) + " d_v=" + std::to_string(options.d_v()) +
                                   " bias=" + std::to_string(bias) + " causal=" + causal_name(causal) +
                                   (backend == Backend::Math ? " backend=math" : "");
        const Sizes s = draw_sizes(rng);
        for (bool batched : {true, false}) {
          const auto shape = [&](int64_t t) {
            return batched ? std::vector<int64_t>{s.batch, t, options.d_in()} : std::vector<int64_t>{t, options.d_in()};
          };
          const torch::Tensor q = torch::randn(shape(s.tq)), k = torch::randn(shape(s.tk)),
                              v = torch::randn(shape(s.tk));
          const std::string layout = batched ? " batched " : " unbatched ";
          for (const MaskCase& c : mask_cases(batched ? s.batch : 0, 1, s.tq, s.tk)) {
            torch::Tensor key = k, value = v;
            if (c.poison) {
              key = poisoned(k, c.masks.key_padding_mask());
              value = poisoned(v, c.masks.key_padding_mask());
            }
            std::vector<c10::IValue> args{q, key, value};
            append_masks(args, c.masks);
            expect_same(config + layout + c.name, head->forward(q, key, value, c.masks), args, {&exported, &loaded},
                        tally[backend]);
          }
          // forward(x): key and value default to the query input; value defaults to the key input.
          const torch::Tensor x = torch::randn(shape(s.tq));
          expect_same(config + layout + "forward(x)", head->forward(x), {x}, {&exported, &loaded}, tally[backend]);
          expect_same(config + layout + "forward(x, kv)", head->forward(q, k, k), {q, k}, {&exported, &loaded},
                      tally[backend]);
          for (const MaskCase& c : mask_cases(batched ? s.batch : 0, 1, s.tq, s.tq)) {
            if (c.poison) continue;
            std::vector<c10::IValue> args{x, c10::IValue(), c10::IValue()};
            append_masks(args, c.masks);
            expect_same(config + layout + "self " + c.name, head->forward(x, x, x, c.masks), args,
                        {&exported, &loaded}, tally[backend]);
          }
        }
      }
    }
  }
  tally.print("AttentionHead");
}

TEST(Export, CrossAttentionMatchesTheModule) {
  std::mt19937 rng(5);
  std::uniform_int_distribution<int64_t> heads_d(1, 3), width_d(1, 9);
  Tallies tally;
  for (bool bias : {true, false}) {
    for (int repeat = 0; repeat < 2; ++repeat) {
      for (Backend backend : {Backend::Auto, Backend::Math}) {
        torch::manual_seed(static_cast<uint64_t>(rng()));
        const auto options = CrossAttentionOptions(width_d(rng), width_d(rng), width_d(rng))
                                 .d_v(width_d(rng))
                                 .num_heads(heads_d(rng))
                                 .bias(bias)
                                 .backend(backend)
                                 // the shared attention settings reach the export too
                                 .causal(repeat == 1)
                                 .causal_alignment(bias ? CausalAlignment::BottomRight : CausalAlignment::TopLeft)
                                 .scale(repeat == 1 ? std::optional<double>(0.7) : std::nullopt)
                                 .alibi(repeat == 1)
                                 .sinks(bias);
        CrossAttention cross(options);
        cross->eval();
        randomize_sinks(cross->sinks);
        torch::jit::Module exported = jit::to_torchscript(*cross);
        torch::jit::Module loaded = round_trip(exported);
        expect_same_parameters(*cross, exported);
        expect_same_parameters(*cross, loaded);
        const std::string config = "cross d_query_in=" + std::to_string(options.d_query_in()) + " d_context_in=" +
                                   std::to_string(options.d_context_in()) + " d_k=" + std::to_string(options.d_k()) +
                                   " d_v=" + std::to_string(options.d_v()) + " heads=" +
                                   std::to_string(options.num_heads()) + " bias=" + std::to_string(bias) +
                                   (backend == Backend::Math ? " backend=math" : "") +
                                   (options.causal() ? " causal scale=0.7 alibi" : "") +
                                   (options.sinks() ? " sinks" : "");
        const Sizes s = draw_sizes(rng);
        for (bool batched : {true, false}) {
          const auto shape = [&](int64_t t, int64_t e) {
            return batched ? std::vector<int64_t>{s.batch, t, e} : std::vector<int64_t>{t, e};
          };
          const torch::Tensor x = torch::randn(shape(s.tq, options.d_query_in()));
          const torch::Tensor context = torch::randn(shape(s.tk, options.d_context_in()));
          for (const MaskCase& c : mask_cases(batched ? s.batch : 0, options.num_heads(), s.tq, s.tk)) {
            const torch::Tensor ctx = c.poison ? poisoned(context, c.masks.key_padding_mask()) : context;
            std::vector<c10::IValue> args{x, ctx};
            append_masks(args, c.masks);
            expect_same(config + (batched ? " batched " : " unbatched ") + c.name, cross->forward(x, ctx, c.masks),
                        args, {&exported, &loaded}, tally[backend]);
          }
        }
      }
    }
  }
  tally.print("CrossAttention");
}

TEST(Export, DropoutOnlyInTrainingModeWithTheSameRandomNumbers) {
  torch::manual_seed(3);
  MultiHeadAttention mha(MultiHeadAttentionOptions(8, 2).dropout(0.4).causal(true));
  const torch::Tensor q = torch::randn({2, 5, 8}), kv = torch::randn({2, 6, 8});
  mha->train();
  torch::jit::Module exported = jit::to_torchscript(*mha);
  EXPECT_TRUE(exported.is_training());
  torch::manual_seed(11);
  const torch::Tensor ours = mha->forward(q, kv, kv);
  torch::manual_seed(11);
  const torch::Tensor theirs = exported.forward({q, kv, kv}).toTensor();
  EXPECT_LE(max_difference(ours, theirs), kTolerance);
  torch::manual_seed(12);
  EXPECT_GT(max_difference(ours, exported.forward({q, kv, kv}).toTensor()), 1e-3) << "dropout is on";

  exported.eval();
  mha->eval();
  EXPECT_FALSE(exported.is_training());
  EXPECT_LE(max_difference(mha->forward(q, kv, kv), exported.forward({q, kv, kv}).toTensor()), kTolerance);
  EXPECT_FALSE(jit::to_torchscript(*mha).is_training()) << "the export takes the module's mode";
}

TEST(Export, IsASnapshotWithItsOptionsAsAttributes) {
  MultiHeadAttention mha(MultiHeadAttentionOptions(12, 3).kdim(5).vdim(7).causal(true).causal_alignment(
      CausalAlignment::TopLeft));
  torch::jit::Module exported = jit::to_torchscript(*mha);
  EXPECT_EQ(exported.type()->name()->qualifiedName(), "__torch__.attn.MultiHeadAttention");
  EXPECT_EQ(exported.attr("embed_dim").toInt(), 12);
  EXPECT_EQ(exported.attr("num_heads").toInt(), 3);
  EXPECT_EQ(exported.attr("head_dim").toInt(), 4);
  EXPECT_EQ(exported.attr("kdim").toInt(), 5);
  EXPECT_EQ(exported.attr("vdim").toInt(), 7);
  EXPECT_TRUE(exported.attr("causal").toBool());
  EXPECT_FALSE(exported.attr("bottom_right").toBool());
  EXPECT_TRUE(exported.attr("output_projection").toBool());
  {
    torch::NoGradGuard no_grad;
    mha->q_proj->weight.add_(1.0);
  }
  EXPECT_FALSE(torch::equal(exported.attr("q_proj").toModule().attr("weight").toTensor(), mha->q_proj->weight));

  AttentionHead head(AttentionHeadOptions(4, 3));
  torch::jit::Module h = jit::to_torchscript(*head);
  EXPECT_TRUE(h.attr("q_proj").toModule().attr("bias").isNone()) << "no bias: a None attribute";
  EXPECT_EQ(h.attr("d_v").toInt(), 3);
  EXPECT_EQ(jit::to_torchscript(*CrossAttention(CrossAttentionOptions(4, 6, 2).num_heads(5))).attr("num_heads").toInt(),
            5);
}

TEST(Export, KeepsTheModulesDtype) {
  torch::manual_seed(8);
  for (torch::Dtype dtype : {torch::kFloat64, torch::kBFloat16}) {
    MultiHeadAttention mha(MultiHeadAttentionOptions(8, 2).kdim(3).causal(true));
    mha->to(dtype);
    mha->eval();
    torch::jit::Module exported = jit::to_torchscript(*mha);
    const auto opts = torch::TensorOptions().dtype(dtype);
    const torch::Tensor q = torch::randn({2, 4, 8}, opts), k = torch::randn({2, 5, 3}, opts),
                        v = torch::randn({2, 5, 8}, opts), additive = torch::randn({4, 5}, opts);
    const auto masks = AttentionMasks().additive_mask(additive);
    std::vector<c10::IValue> args{q, k, v};
    append_masks(args, masks);
    const torch::Tensor ours = mha->forward(q, k, v, masks), theirs = exported.forward(args).toTensor();
    EXPECT_EQ(theirs.scalar_type(), dtype);
    EXPECT_LE(max_difference(ours, theirs), dtype == torch::kFloat64 ? 1e-12 : 2e-2) << c10::toString(dtype);
  }
}

TEST(Export, RejectsMalformedMasks) {
  MultiHeadAttention mha(MultiHeadAttentionOptions(8, 2));
  torch::jit::Module exported = jit::to_torchscript(*mha);
  const torch::Tensor q = torch::randn({2, 3, 8}), kv = torch::randn({2, 4, 8});
  const auto call = [&](const AttentionMasks& masks) {
    std::vector<c10::IValue> args{q, kv, kv};
    append_masks(args, masks);
    exported.forward(args);
  };
  EXPECT_THROW_CONTAINING(call(AttentionMasks().key_padding_mask(torch::zeros({4, 2}, torch::kBool))),
                        "key_padding_mask");
  EXPECT_THROW_CONTAINING(call(AttentionMasks().attend_mask(torch::ones({3, 4}))), "attend_mask must be a bool");
  EXPECT_THROW_CONTAINING(call(AttentionMasks().attend_mask(torch::ones({2, 3, 4}, torch::kBool))),
                        "attend_mask must be [Tq, Tk] or [B|1, H|1, Tq, Tk]");
  EXPECT_THROW_CONTAINING(call(AttentionMasks().additive_mask(torch::zeros({3, 4}, torch::kDouble))), "additive_mask");
  EXPECT_THROW_CONTAINING(exported.forward({q, torch::randn({2, 4, 5}), kv}), "last dimension 8");
  EXPECT_THROW_CONTAINING(call(AttentionMasks().key_padding_mask(torch::zeros({2, 4}))),
                          "key_padding_mask must be a bool tensor (true = padding), got float32");
  EXPECT_THROW_CONTAINING(exported.forward({q, kv.to(torch::kFloat64), kv}),
                          "the key is float64 but the module's parameters are float32");
}

// ---------------------------------------------------------------------------------------------------------
// Files for tests/python/test_torchscript.py: <case>.pt (the exported module) and <case>.inputs.pt (a dict of
// the forward arguments by name, "expected" and "param:<name>" for every parameter).

void write_atomically(const std::filesystem::path& path, const std::string& bytes) {
  const std::filesystem::path tmp = path.string() + ".tmp." + std::to_string(getpid());
  {
    std::ofstream out(tmp, std::ios::binary);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    ASSERT_TRUE(out.good()) << "cannot write " << tmp;
  }
  std::filesystem::rename(tmp, path);
}

void write_case(const std::string& name, const torch::nn::Module& module, const torch::jit::Module& exported,
                const std::vector<std::pair<std::string, torch::Tensor>>& inputs, const torch::Tensor& expected) {
  const std::filesystem::path dir = std::filesystem::path(ATTN_IO_OUT_DIR) / "export";
  std::filesystem::create_directories(dir);
  std::ostringstream module_bytes;
  exported.save(module_bytes);
  write_atomically(dir / (name + ".pt"), module_bytes.str());

  c10::Dict<std::string, at::Tensor> dict;
  for (const auto& [key, value] : inputs) {
    if (value.defined()) dict.insert(key, value);
  }
  dict.insert("expected", expected.detach());
  for (const auto& p : module.named_parameters()) dict.insert("param:" + p.key(), p.value().detach());
  const std::vector<char> bytes = torch::pickle_save(c10::IValue(dict));
  write_atomically(dir / (name + ".inputs.pt"), std::string(bytes.begin(), bytes.end()));
}

TEST(Export, WritesFilesForPython) {
  torch::manual_seed(99);
  const double inf = std::numeric_limits<double>::infinity();
  {  // MultiHeadAttention, batched, top-left causal, every mask, NaN/Inf at padded keys
    MultiHeadAttention mha(MultiHeadAttentionOptions(16, 4).kdim(12).vdim(10).causal(true).causal_alignment(
        CausalAlignment::TopLeft));
    mha->eval();
    torch::Tensor pad = torch::zeros({3, 7}, torch::kBool);
    pad[1].slice(0, 5) = true;
    pad[2] = true;
    torch::Tensor attend = torch::rand({3, 1, 5, 7}) < 0.8;
    torch::Tensor additive = torch::randn({5, 7});
    additive[2][3] = -inf;
    const torch::Tensor q = torch::randn({3, 5, 16}), k = poisoned(torch::randn({3, 7, 12}), pad),
                        v = poisoned(torch::randn({3, 7, 10}), pad);
    const auto masks = AttentionMasks().key_padding_mask(pad).attend_mask(attend).additive_mask(additive);
    const torch::Tensor out = mha->forward(q, k, v, masks);
    ASSERT_TRUE(out.isfinite().all().item<bool>());
    write_case("mha_masks", *mha, jit::to_torchscript(*mha),
               {{"query", q}, {"key", k}, {"value", v}, {"key_padding_mask", pad}, {"attend_mask", attend},
                {"additive_mask", additive}},
               out);
  }
  {  // MultiHeadAttention, unbatched self-attention (only "query": Python passes it three times), no
     // output projection, no bias, bottom-right causal with an additive mask
    MultiHeadAttention mha(
        MultiHeadAttentionOptions(6, 2).head_dim(5).bias(false).output_projection(false).causal(true));
    mha->eval();
    const torch::Tensor x = torch::randn({4, 6});
    const torch::Tensor additive = torch::randn({2, 4, 4});
    write_case("mha_self_unbatched", *mha, jit::to_torchscript(*mha), {{"query", x}, {"additive_mask", additive}},
               mha->forward(x, x, x, AttentionMasks().additive_mask(additive)));
  }
  {  // AttentionHead, self-attention from query_input alone, padding
    AttentionHead head(AttentionHeadOptions(8, 5).d_v(3).bias(true));
    head->eval();
    const torch::Tensor x = torch::randn({2, 6, 8});
    torch::Tensor pad = torch::zeros({2, 6}, torch::kBool);
    pad[0].slice(0, 4) = true;
    write_case("head_self", *head, jit::to_torchscript(*head), {{"query_input", x}, {"key_padding_mask", pad}},
               head->forward(x, x, x, AttentionMasks().key_padding_mask(pad)));
  }
  {  // AttentionHead, unbatched, separate key/value inputs, Tq > Tk, top-left causal, attend mask [1, Tq, Tk]
    AttentionHead head(AttentionHeadOptions(7, 4).d_v(6).causal(true).causal_alignment(CausalAlignment::TopLeft));
    head->eval();
    const torch::Tensor q = torch::randn({6, 7}), k = torch::randn({4, 7}), v = torch::randn({4, 7});
    const torch::Tensor attend = torch::rand({1, 6, 4}) < 0.7;
    write_case("head_unbatched", *head, jit::to_torchscript(*head),
               {{"query_input", q}, {"key_input", k}, {"value_input", v}, {"attend_mask", attend}},
               head->forward(q, k, v, AttentionMasks().attend_mask(attend)));
  }
  {  // CrossAttention, batched, padding with Inf in the context, additive mask per head
    CrossAttention cross(CrossAttentionOptions(12, 20, 6).d_v(5).num_heads(3).bias(true));
    cross->eval();
    torch::Tensor pad = torch::zeros({2, 9}, torch::kBool);
    pad[1].slice(0, 6) = true;
    const torch::Tensor x = torch::randn({2, 4, 12}), context = poisoned(torch::randn({2, 9, 20}), pad);
    const torch::Tensor additive = torch::randn({1, 3, 4, 9});
    const auto masks = AttentionMasks().key_padding_mask(pad).additive_mask(additive);
    write_case("cross_masks", *cross, jit::to_torchscript(*cross),
               {{"x", x}, {"context", context}, {"key_padding_mask", pad}, {"additive_mask", additive}},
               cross->forward(x, context, masks));
  }
  std::cout << "[ export ] wrote the Python cases to " << ATTN_IO_OUT_DIR << "/export" << "\n";
}

}  // namespace
}  // namespace attn::test
