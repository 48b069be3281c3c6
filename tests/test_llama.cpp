// The apps' Llama decoder (apps/models, attn::MultiHeadAttention with grouped-query heads, rotary embeddings and
// the KV cache) on SmolLM2-135M-Instruct against transformers on the same GGUF: greedy generation of 64 tokens
// for six prompts (one over 1,000 tokens) gives the same tokens, with every step's logits within 1e-3, one by
// one and as one ragged batch. Also the sampler's filters, streaming text, and the errors. References from
// tests/reference/make_generation_references.py; built in the 2.x lane (tests/CMakeLists.txt).

#include "chat_format.h"
#include "generation.h"
#include "llama.h"
#include "sampling.h"
#include "text_stream.h"

#include <attn/io/files.h>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <fstream>
#include <iostream>
#include <map>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace attn::models {
namespace {

const std::string kModel = ATTN_SMOLLM2_DIR;
constexpr double kLogitTolerance = 1e-3;

struct Reference {
  std::vector<std::vector<int64_t>> prompts, tokens;
  std::vector<torch::Tensor> logits;  // [64, vocab] per prompt
};

std::vector<int64_t> ids_of(const torch::Tensor& t) {
  const torch::Tensor c = t.to(torch::kLong).contiguous();
  return std::vector<int64_t>(c.data_ptr<int64_t>(), c.data_ptr<int64_t>() + c.numel());
}

const Reference& reference() {
  static const Reference r = [] {
    const auto tensors = io::read_tensors(ATTN_GENERATION_REFERENCES);
    Reference out;
    for (int n = 0; tensors.count("prompt." + std::to_string(n)); ++n) {
      out.prompts.push_back(ids_of(tensors.at("prompt." + std::to_string(n))));
      out.tokens.push_back(ids_of(tensors.at("tokens." + std::to_string(n))));
      out.logits.push_back(tensors.at("logits." + std::to_string(n)));
    }
    return out;
  }();
  return r;
}

Llama& smollm2() {
  static Llama model = [] {
    at::set_num_threads(static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
    Llama m(LlamaConfig::from_file(kModel + "/config.json"));
    m->load(kModel + "/model.safetensors");
    m->eval();
    return m;
  }();
  return model;
}

GenerationOptions greedy_64() {
  GenerationOptions options;
  options.max_new_tokens = 64;  // no stop tokens: the reference ran all 64 steps too
  options.keep_logits = true;
  return options;
}

/// The largest |ours - reference| over every step of one prompt.
double worst_logit_error(const std::vector<torch::Tensor>& ours, const torch::Tensor& theirs) {
  double worst = 0.0;
  for (size_t step = 0; step < ours.size(); ++step) {
    worst = std::max(worst, (ours[step] - theirs[static_cast<int64_t>(step)]).abs().max().item<double>());
  }
  return worst;
}

TEST(Llama, ReferenceCoversTheIssuesPrompts) {
  const Reference& r = reference();
  ASSERT_GE(r.prompts.size(), 5u);
  size_t longest = 0;
  for (const auto& p : r.prompts) longest = std::max(longest, p.size());
  EXPECT_GT(longest, 1000u);
  for (const auto& t : r.tokens) EXPECT_EQ(t.size(), 64u);
}

TEST(Llama, GreedyTokensAndLogitsMatchTransformersPromptByPrompt) {
  const Reference& r = reference();
  for (size_t n = 0; n < r.prompts.size(); ++n) {
    SCOPED_TRACE("prompt " + std::to_string(n) + " (" + std::to_string(r.prompts[n].size()) + " tokens)");
    const GenerationResult result = generate(smollm2(), {r.prompts[n]}, greedy_64());
    EXPECT_EQ(result.tokens[0], r.tokens[n]);
    ASSERT_EQ(result.logits[0].size(), 64u);
    const double worst = worst_logit_error(result.logits[0], r.logits[n]);
    EXPECT_LE(worst, kLogitTolerance);
    std::cout << "prompt " << n << " (" << r.prompts[n].size() << " tokens): largest logit difference " << worst << "\n";
  }
}

TEST(Llama, RaggedBatchGivesTheTokensOfEachPromptAlone) {
  const Reference& r = reference();
  const GenerationResult batched = generate(smollm2(), r.prompts, greedy_64());
  ASSERT_EQ(batched.tokens.size(), r.prompts.size());
  for (size_t n = 0; n < r.prompts.size(); ++n) {
    SCOPED_TRACE("row " + std::to_string(n) + " (" + std::to_string(r.prompts[n].size()) + " tokens)");
    EXPECT_EQ(batched.tokens[n], r.tokens[n]);
    EXPECT_LE(worst_logit_error(batched.logits[n], r.logits[n]), kLogitTolerance);
  }
}

TEST(Llama, StopTokenEndsItsRowOnly) {
  const Reference& r = reference();
  // Prompt 0's reference continues "... Paris." then <|im_end|> (id 2): stopping at it ends row 0 there, and
  // row 1 runs on to max_new_tokens.
  GenerationOptions options;
  options.max_new_tokens = 12;
  options.stop_tokens = {2};
  const GenerationResult result = generate(smollm2(), {r.prompts[0], r.prompts[1]}, options);
  const auto& expected = r.tokens[0];
  const auto stop = std::find(expected.begin(), expected.end(), 2);
  ASSERT_NE(stop, expected.end());
  EXPECT_EQ(result.tokens[0], std::vector<int64_t>(expected.begin(), stop + 1));
  EXPECT_EQ(result.tokens[1], std::vector<int64_t>(r.tokens[1].begin(), r.tokens[1].begin() + 12));
}

TEST(Llama, ChatFormatGivesTheTemplatesPromptIds) {
  // The reference prompts were rendered by transformers' apply_chat_template; ours from convert-gguf.py's parts.
  const auto chat = ChatFormat::from_file(kModel + "/attn-convert.json");
  ASSERT_TRUE(chat.has_value());
  const auto tokenizer = text::ByteLevelBpe::from_file(kModel + "/tokenizer.json");
  EXPECT_EQ(tokenizer.encode(chat->prompt("What is the capital of France?")), reference().prompts[0]);
  const std::string with_system = chat->prompt("Hi", "Be brief.");
  EXPECT_EQ(with_system, "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
}

TEST(Llama, GenerateRefusesEmptyPromptsAndTooLongRuns) {
  GenerationOptions options;
  EXPECT_THROW(generate(smollm2(), {}, options), std::invalid_argument);
  EXPECT_THROW(generate(smollm2(), {{1, 2}, {}}, options), std::invalid_argument);
  options.max_new_tokens = smollm2()->config.max_position_embeddings;  // 2 + 8192 > 8192
  EXPECT_THROW(generate(smollm2(), {{1, 2}}, options), std::invalid_argument);
  options.max_new_tokens = 0;
  EXPECT_THROW(generate(smollm2(), {{1, 2}}, options), std::invalid_argument);
}

TEST(Llama, ConfigErrorsNameTheFileAndField) {
  const std::string path = ::testing::TempDir() + "/attn_llama_config.json";
  const auto expect_error = [&](const std::string& json, const std::string& words) {
    std::ofstream(path) << json;
    try {
      LlamaConfig::from_file(path);
      ADD_FAILURE() << "no error for " << json;
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
    }
  };
  expect_error(R"({"model_type": "bert"})", "this runs 'llama' models");
  expect_error(R"({"model_type": "llama", "hidden_size": 8})", "no 'intermediate_size' field");
  expect_error("{not json", "");
}

TEST(Sampler, GreedyIsTheArgmaxAndTopKOneIsToo) {
  const torch::Tensor logits = torch::tensor({0.1f, 2.0f, -1.0f, 1.9f});
  EXPECT_EQ(Sampler(SamplingOptions()).next(logits), 1);
  SamplingOptions top1;
  top1.temperature = 5.0;
  top1.top_k = 1;
  Sampler sampler(top1);
  for (int i = 0; i < 50; ++i) EXPECT_EQ(sampler.next(logits), 1);
}

TEST(Sampler, TopKAndTopPKeepOnlyTheirTokens) {
  // Probabilities 0.5, 0.3, 0.15, 0.05. top_p = 0.7 keeps {0, 1} (transformers' rule: drop the tokens whose
  // cumulative probability from the bottom stays within 1 - top_p: 0.05 and 0.2); top_k = 3 keeps {0, 1, 2}.
  const torch::Tensor logits = torch::log(torch::tensor({0.5, 0.3, 0.15, 0.05}));
  SamplingOptions p;
  p.temperature = 1.0;
  p.top_p = 0.7;
  SamplingOptions k;
  k.temperature = 1.0;
  k.top_k = 3;
  Sampler nucleus(p), top3(k);
  std::vector<int> nucleus_counts(4, 0), top3_counts(4, 0);
  for (int i = 0; i < 2000; ++i) {
    ++nucleus_counts[nucleus.next(logits)];
    ++top3_counts[top3.next(logits)];
  }
  EXPECT_EQ(nucleus_counts[2] + nucleus_counts[3], 0);
  EXPECT_EQ(top3_counts[3], 0);
  // Renormalised: 0.5/0.8 = 0.625 of the nucleus draws are token 0 (4 standard deviations is about 0.043).
  EXPECT_NEAR(nucleus_counts[0] / 2000.0, 0.625, 0.045);
  EXPECT_NEAR(top3_counts[2] / 2000.0, 0.15 / 0.95, 0.035);
}

TEST(Sampler, TemperatureSharpensAndTheSeedRepeats) {
  const torch::Tensor logits = torch::log(torch::tensor({0.6, 0.4}));
  SamplingOptions cold;
  cold.temperature = 0.25;  // 0.6^4 / (0.6^4 + 0.4^4) = 0.835
  cold.seed = 7;
  Sampler a(cold), b(cold);
  int zeros = 0;
  for (int i = 0; i < 2000; ++i) {
    const int64_t token = a.next(logits);
    zeros += token == 0;
    EXPECT_EQ(b.next(logits), token);
  }
  EXPECT_NEAR(zeros / 2000.0, 0.835, 0.035);
}

TEST(Sampler, RefusesBadOptions) {
  SamplingOptions o;
  o.temperature = -1;
  EXPECT_THROW(Sampler{o}, std::invalid_argument);
  o = SamplingOptions();
  o.top_p = 0.0;
  EXPECT_THROW(Sampler{o}, std::invalid_argument);
  o = SamplingOptions();
  o.top_k = -2;
  EXPECT_THROW(Sampler{o}, std::invalid_argument);
}

TEST(TextStream, PiecesAreWholeCharactersAndAddUpToTheText) {
  const auto tokenizer = text::ByteLevelBpe::from_file(kModel + "/tokenizer.json");
  const std::string text = "Emoji 👩‍👩‍👧‍👦 and 中文字符, ß, e\u0301.";
  text::TextStream stream(tokenizer);
  std::string joined;
  for (const int64_t id : tokenizer.encode(text)) {
    const std::string piece = stream.push(id);
    EXPECT_EQ(text::complete_utf8_prefix(piece), piece.size()) << piece;
    joined += piece;
  }
  joined += stream.finish();
  EXPECT_EQ(joined, text);
}

TEST(TextStream, CompleteUtf8PrefixStopsBeforeAnUnfinishedCharacter) {
  EXPECT_EQ(text::complete_utf8_prefix("abc"), 3u);
  EXPECT_EQ(text::complete_utf8_prefix("a\xE4\xB8"), 1u);          // 中 cut after two of three bytes
  EXPECT_EQ(text::complete_utf8_prefix("a\xE4\xB8\xAD"), 4u);      // 中 whole
  EXPECT_EQ(text::complete_utf8_prefix("\xF0\x9F\x91"), 0u);       // 👩 cut after three of four
  EXPECT_EQ(text::complete_utf8_prefix(""), 0u);
}

}  // namespace
}  // namespace attn::models
