// The apps' BERT encoder (apps/models, attn::MultiHeadAttention with key-padding masks) on all-MiniLM-L6-v2
// against sentence-transformers on the same folder: 100 sentences of mixed lengths (3 to 256 tokens, the longest
// truncated), embedded in padded batches, within 1e-5 of the reference with cosine >= 0.99999. References from
// tests/reference/make_embedding_references.py; built in the 2.x lane (tests/CMakeLists.txt).

#include "bert.h"
#include "sentence_embedding.h"
#include "word_piece.h"

#include <attn/io/files.h>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <fstream>
#include <iostream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace attn::models {
namespace {

const std::string kModel = ATTN_MINILM_DIR;

std::vector<std::string> reference_sentences() {
  std::ifstream in(std::string(ATTN_EMBEDDING_REFERENCES_JSON));
  nlohmann::json j;
  in >> j;
  return j.get<std::vector<std::string>>();
}

const std::map<std::string, torch::Tensor>& reference() {
  static const auto tensors = io::read_tensors(ATTN_EMBEDDING_REFERENCES);
  return tensors;
}

Bert& minilm() {
  static Bert model = [] {
    at::set_num_threads(static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
    Bert m(BertConfig::from_file(kModel + "/config.json"));
    m->load(kModel + "/model.safetensors");
    m->eval();
    return m;
  }();
  return model;
}

const text::WordPiece& tokenizer() {
  static const text::WordPiece t = text::WordPiece::from_file(kModel + "/tokenizer.json");
  return t;
}

TEST(Bert, HundredSentencesInPaddedBatchesMatchSentenceTransformers) {
  const std::vector<std::string> sentences = reference_sentences();
  ASSERT_EQ(sentences.size(), 100u);
  const torch::Tensor expected = reference().at("embeddings");
  SentenceEmbeddingOptions options;
  options.batch_size = 32;
  options.max_length = 256;
  const torch::Tensor ours = embed_sentences(minilm(), tokenizer(), sentences, options);
  ASSERT_EQ(ours.sizes(), expected.sizes());
  const double worst = (ours - expected).abs().max().item<double>();
  const double lowest_cosine = (ours * expected).sum(-1).min().item<double>();
  std::cout << "largest difference " << worst << ", lowest cosine " << lowest_cosine << "\n";
  EXPECT_LE(worst, 1e-5);
  EXPECT_GE(lowest_cosine, 0.99999);
}

TEST(Bert, BatchSizeDoesNotChangeTheEmbeddings) {
  // One sentence per batch (no padding at all) against the reference, which sentence-transformers padded.
  const std::vector<std::string> sentences = reference_sentences();
  const std::vector<std::string> some(sentences.begin(), sentences.begin() + 20);
  SentenceEmbeddingOptions options;
  options.batch_size = 1;
  const torch::Tensor ours = embed_sentences(minilm(), tokenizer(), some, options);
  EXPECT_LE((ours - reference().at("embeddings").narrow(0, 0, 20)).abs().max().item<double>(), 1e-5);
}

TEST(Bert, TruncatedLengthsMatchTheReferenceTokenizer) {
  const std::vector<std::string> sentences = reference_sentences();
  const torch::Tensor lengths = reference().at("lengths");
  int64_t truncated = 0;
  for (size_t i = 0; i < sentences.size(); ++i) {
    SCOPED_TRACE(sentences[i]);
    const auto ids = tokenizer().encode_truncated(sentences[i], 256);
    EXPECT_EQ(static_cast<int64_t>(ids.size()), lengths[static_cast<int64_t>(i)].item<int64_t>());
    truncated += ids.size() == 256;
  }
  EXPECT_GE(truncated, 5);  // the reference covers truncation
}

TEST(Bert, ForwardRefusesMismatchedInputs) {
  const torch::Tensor ids = torch::ones({2, 5}, torch::kLong);
  EXPECT_THROW(minilm()(ids, torch::ones({2, 4}, torch::kLong)), c10::Error);
  EXPECT_THROW(minilm()(torch::ones({1, 513}, torch::kLong), torch::ones({1, 513}, torch::kLong)), c10::Error);
  EXPECT_THROW(embed_sentences(minilm(), tokenizer(), {"a"}, SentenceEmbeddingOptions{0}), std::invalid_argument);
}

TEST(Bert, ConfigErrorsNameTheFileAndField) {
  const std::string path = ::testing::TempDir() + "/attn_bert_config.json";
  const auto expect_error = [&](const std::string& json, const std::string& words) {
    std::ofstream(path) << json;
    try {
      BertConfig::from_file(path);
      ADD_FAILURE() << "no error for " << json;
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
    }
  };
  expect_error(R"({"model_type": "llama"})", "this runs 'bert' models");
  expect_error(R"({"model_type": "bert", "hidden_act": "relu"})", "hidden_act 'relu'");
  expect_error(R"({"model_type": "bert", "hidden_size": 8})", "no 'num_hidden_layers' field");
  expect_error(R"({"model_type": "bert", "hidden_size": 8, "num_hidden_layers": 0})",
               "num_hidden_layers must be a positive integer, got 0");
}

TEST(Bert, ConfigThatDisagreesWithItsWeightsIsRefused) {
  const NamedWeights weights(kModel + "/model.safetensors");
  BertConfig config = BertConfig::from_file(kModel + "/config.json");
  EXPECT_NO_THROW(config.check_weights(weights));
  config.num_layers = 100000;
  try {
    config.check_weights(weights);
    ADD_FAILURE() << "no error for 100000 layers";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("hold 6 blocks encoder.layer.0..5, but the model config's "
                                         "num_hidden_layers is 100000"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace attn::models
