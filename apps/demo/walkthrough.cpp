// attn-demo: walks through notebook 000 ("Life is short, eat dessert first") with the attn library:
// tokens -> embedding -> one attention head step by step -> multi-head attention, then shows every
// head's attention weights as a terminal heatmap (heatmap.h) and, optionally, as an SVG file (svg.h).
// The app uses only the public API (<attn/...>), so it doubles as an example of it.

#include <attn/attn.h>
#include <attn/io/files.h>

#include "app_main.h"
#include "command_line.h"
#include "heatmap.h"
#include "svg.h"

#include <fmt/core.h>
#include <fmt/format.h>
#include <torch/torch.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace {

using attn_apps::parse_integer;
using attn_apps::UsageError;

constexpr const char* kDefaultSentence = "Life is short, eat dessert first";
constexpr uint64_t kDefaultSeed = 123;
constexpr int64_t kDefaultHeads = 3;  // the notebook's `head = 3`
constexpr int64_t kMaxHeads = 64;
// Each head prints a words x words heatmap (and draws one with --svg): 64 words by 64 heads is already 262,144
// cells, a walkthrough no one reads. Longer inputs are attn-bench's.
constexpr size_t kMaxWords = 64;
constexpr int64_t kEmbedDim = 16;  // d in the notebook
constexpr int64_t kDimQK = 24;     // d_q = d_k
constexpr int64_t kDimV = 28;      // d_v of the single head

// The notebook's printed values for the default sentence and seed (0-based: query row 1, key column 4).
constexpr double kNotebookOmega24 = -98.1709;
const std::vector<double> kNotebookOmega2 = {83.1533, 95.5014, -100.8583, 63.5880, -98.1709, 9.3997};
const std::vector<double> kNotebookWeights2 = {7.4329e-02, 9.2430e-01, 3.6185e-18, 1.3699e-03, 6.2628e-18, 2.1523e-08};

constexpr const char* kUsage = R"(Usage: attn-demo [OPTIONS]

Walks through notebook 000's self-attention example with the attn library, then prints each
head's attention weights as a heatmap (rows: query tokens, columns: key tokens).

Options:
  --sentence TEXT   sentence to attend over, at most 64 words; commas are removed, words split on
                    whitespace (default: "Life is short, eat dessert first")
  --heads N         number of heads of the multi-head module, 1..64 (default: 3)
  --causal          causal mask: each token attends only to itself and earlier tokens
  --seed N          seed for torch::manual_seed, a non-negative integer (default: 123)
  --device DEV      auto | cpu | cuda | cuda:N (default: auto = cuda:0 if available, else cpu)
  --svg FILE        also write all heads' heatmaps to FILE as a standalone SVG image
  --no-color        plain numbers, no colours (also when NO_COLOR is set or stdout is no terminal)
  -h, --help        show this help and exit

Values may also be given as --option=VALUE.

Example:
  attn-demo --sentence "Time flies like an arrow" --heads 2 --causal --svg heads.svg
)";

struct DemoOptions {
  std::string sentence = kDefaultSentence;
  int64_t heads = kDefaultHeads;
  bool causal = false;
  uint64_t seed = kDefaultSeed;
  std::string device = "auto";
  std::string svg_path;  // empty: no SVG
  bool no_color = false;
};

// ---------------------------------------------------------------------------------------------------------
// Tokens and vocabulary, exactly as the notebook builds them.

// sentence.replace(",", "").split(): other punctuation stays part of its word.
std::vector<std::string> tokenize(const std::string& sentence) {
  std::string without_commas = sentence;
  without_commas.erase(std::remove(without_commas.begin(), without_commas.end(), ','), without_commas.end());
  std::istringstream stream(without_commas);
  std::vector<std::string> words;
  for (std::string word; stream >> word;) words.push_back(word);
  return words;
}

// {s: i for i, s in enumerate(sorted(words))}. With repeated words the later index wins and some ids are
// never used, just like the Python dict; the notebook's Embedding then needs len(words) rows.
// std::map orders std::string bytewise (as unsigned char), which for UTF-8 equals Python's code-point order.
std::map<std::string, int64_t> build_vocabulary(std::vector<std::string> words) {
  std::sort(words.begin(), words.end());
  std::map<std::string, int64_t> vocabulary;
  for (size_t i = 0; i < words.size(); ++i) vocabulary[words[i]] = static_cast<int64_t>(i);
  return vocabulary;
}

// ---------------------------------------------------------------------------------------------------------
// Arguments.

DemoOptions parse_args(int argc, char** argv) {
  DemoOptions options;
  attn_apps::CommandLine command_line;
  command_line.add_option("--sentence", [&](const std::string& value) { options.sentence = value; });
  command_line.add_option("--heads", [&](const std::string& value) {
    options.heads =
        parse_integer<int64_t>("--heads", value, 1, kMaxHeads, fmt::format("an integer in 1..{}", kMaxHeads));
  });
  command_line.add_option("--seed", [&](const std::string& value) {
    options.seed = parse_integer<uint64_t>("--seed", value, 0, UINT64_MAX, "a non-negative integer");
  });
  command_line.add_option("--device", [&](const std::string& value) {
    try {
      attn::resolve_device(value);  // the spelling and whether the device is there: a usage error either way
    } catch (const c10::Error& e) {
      throw UsageError(fmt::format("--device {}: {}", value, e.what_without_backtrace()));
    }
    options.device = value;
  });
  command_line.add_output_file_option("--svg", options.svg_path);
  command_line.add_flag("--causal", [&] { options.causal = true; });
  command_line.add_flag("--no-color", [&] { options.no_color = true; });
  command_line.parse(argc, argv);
  const size_t words = tokenize(options.sentence).size();
  if (words == 0) throw UsageError("--sentence has no words");
  if (words > kMaxWords) {
    throw UsageError(fmt::format("--sentence has {} words; the demo prints a words x words heatmap per head, so it "
                                 "takes at most {} (attn-bench times long sequences)",
                                 words, kMaxWords));
  }
  return options;
}

// ---------------------------------------------------------------------------------------------------------
// Formatting helpers.

std::string shape(const torch::Tensor& tensor) { return fmt::format("[{}]", fmt::join(tensor.sizes(), ", ")); }

// Python's repr of a str, enough for printing the dictionary like the notebook's comment.
std::string python_repr(const std::string& text) {
  const char quote = (text.find('\'') != std::string::npos && text.find('"') == std::string::npos) ? '"' : '\'';
  std::string out(1, quote);
  for (char c : text) {
    if (c == quote || c == '\\') out += '\\';
    out += c;
  }
  return out + quote;
}

// A list as Python prints it, "[a, b, c]"; a scalar (scalar = true) without the brackets.
std::string format_values(const std::vector<double>& values, const char* spec, bool scalar) {
  std::vector<std::string> parts;
  for (double v : values) parts.push_back(fmt::format(fmt::runtime(spec), v));
  return scalar && parts.size() == 1 ? parts.front() : fmt::format("[{}]", fmt::join(parts, ", "));
}

std::vector<double> to_vector(const torch::Tensor& tensor) {
  const torch::Tensor flat = tensor.detach().to(torch::kCPU, torch::kDouble).contiguous().view(-1);
  return std::vector<double>(flat.data_ptr<double>(), flat.data_ptr<double>() + flat.numel());
}

struct Tolerance {
  double rel, abs;
};

bool close_to(const std::vector<double>& ours, const std::vector<double>& expected, Tolerance tol) {
  if (ours.size() != expected.size()) return false;
  for (size_t i = 0; i < ours.size(); ++i)
    if (std::abs(ours[i] - expected[i]) > tol.abs + tol.rel * std::abs(expected[i])) return false;
  return true;
}

// Prints our values and, for the notebook's own sentence and seed, the notebook's next to them.
void print_with_notebook(const std::string& label, const std::vector<double>& ours, const std::vector<double>& notebook,
                         const char* spec, bool compare, Tolerance tol) {
  const bool scalar = notebook.size() == 1;
  fmt::print("{} = {}\n", label, format_values(ours, spec, scalar));
  if (compare)
    fmt::print("    notebook: {}  ({})\n", format_values(notebook, spec, scalar),
               close_to(ours, notebook, tol) ? "match" : "DIFFERENT");
}

// ---------------------------------------------------------------------------------------------------------
// The walkthrough.

void section(const char* title) { fmt::print("\n== {} ==\n", title); }

// Notebook 000's single head, one step at a time, through attn::AttentionHead's projections.
void single_head_walkthrough(const torch::Tensor& x, const DemoOptions& options, bool is_notebook_setup) {
  section("3. One attention head, step by step");
  torch::manual_seed(options.seed);
  const torch::Tensor w_query = torch::randn({kDimQK, kEmbedDim});
  const torch::Tensor w_key = torch::randn({kDimQK, kEmbedDim});
  const torch::Tensor w_value = torch::randn({kDimV, kEmbedDim});

  attn::AttentionHead head(attn::AttentionHeadOptions(kEmbedDim, kDimQK).d_v(kDimV).causal(options.causal));
  {
    torch::NoGradGuard no_grad;  // copying into parameters must not be recorded by autograd
    head->q_proj->weight.copy_(w_query);
    head->k_proj->weight.copy_(w_key);
    head->v_proj->weight.copy_(w_value);
  }
  fmt::print("W_query {}, W_key {}, W_value {} (torch::randn after manual_seed({}))\n", shape(w_query), shape(w_key),
             shape(w_value), options.seed);

  torch::NoGradGuard no_grad;
  const torch::Tensor q = head->q_proj(x), k = head->k_proj(x), v = head->v_proj(x);
  fmt::print("Q = q_proj(x): {}   K = k_proj(x): {}   V = v_proj(x): {}\n", shape(q), shape(k), shape(v));

  // The notebook's example: query_2 (the 2nd word) against keys[4] (0-based: the 5th word), clamped for short
  // sentences. Labels keep the notebook's own mixed 1-based/0-based names.
  const int64_t tokens = x.size(0), qi = std::min<int64_t>(1, tokens - 1), ki = std::min<int64_t>(4, tokens - 1);
  const torch::Tensor omega = q.matmul(k.t());
  print_with_notebook(fmt::format("omega_{}{} = query_{}.dot(keys[{}])", qi + 1, ki, qi + 1, ki),
                      {omega[qi][ki].item<double>()}, {kNotebookOmega24}, "{:.4f}", is_notebook_setup, {1e-5, 2e-3});
  print_with_notebook(fmt::format("omega_{} = query_{} @ keys.T", qi + 1, qi + 1), to_vector(omega[qi]),
                      kNotebookOmega2, "{:.4f}", is_notebook_setup, {1e-5, 2e-3});

  const auto [context, weights] = head->forward_with_weights(x, x, x);
  print_with_notebook(fmt::format("attention_weights_{} = softmax(omega_{} / sqrt({})){}", qi + 1, qi + 1, kDimQK,
                                  options.causal ? " with causal mask" : ""),
                      to_vector(weights[qi]), kNotebookWeights2, "{:.4e}", is_notebook_setup && !options.causal,
                      {1e-3, 1e-12});
  fmt::print("context vectors (head output): {}\n", shape(context));
}

// Builds the multi-head module with the notebook's per-head randn weights; returns weights [H, T, T] on the CPU.
torch::Tensor multi_head_weights(const torch::Tensor& x, const DemoOptions& options, const torch::Device& device) {
  section("4. Multi-head attention");
  const int64_t heads = options.heads;
  attn::MultiHeadAttention mha(
      attn::MultiHeadAttentionOptions(kEmbedDim, heads).head_dim(kDimQK).bias(false).causal(options.causal));
  torch::manual_seed(options.seed);
  const torch::Tensor w_query = torch::randn({heads, kDimQK, kEmbedDim});
  const torch::Tensor w_key = torch::randn({heads, kDimQK, kEmbedDim});
  const torch::Tensor w_value = torch::randn({heads, kDimQK, kEmbedDim});
  {
    torch::NoGradGuard no_grad;
    mha->q_proj->weight.copy_(w_query.reshape({heads * kDimQK, kEmbedDim}));
    mha->k_proj->weight.copy_(w_key.reshape({heads * kDimQK, kEmbedDim}));
    mha->v_proj->weight.copy_(w_value.reshape({heads * kDimQK, kEmbedDim}));
  }
  mha->to(device);
  fmt::print("MultiHeadAttention(embed_dim={}, heads={}, head_dim={}, bias=false, causal={}) on {}\n", kEmbedDim, heads,
             kDimQK, options.causal, device.str());
  fmt::print("per-head weights: torch::randn {} for W_q, W_k, W_v after manual_seed({})\n", shape(w_query),
             options.seed);

  torch::NoGradGuard no_grad;
  const torch::Tensor input = x.to(device);
  const auto [output, weights] = mha->forward_with_weights(input, input, input, {}, attn::HeadWeights::PerHead);
  fmt::print("output: {}   attention weights: {}\n", shape(output), shape(weights));
  return weights.to(torch::kCPU, torch::kDouble).contiguous();
}

bool use_color(const DemoOptions& options) {
  const char* no_color = std::getenv("NO_COLOR");  // https://no-color.org: set and non-empty disables colour
  return !options.no_color && isatty(STDOUT_FILENO) && !(no_color && *no_color);
}

int run(const DemoOptions& options) {
  // Resolve first, so a bad or unavailable --device fails before any output.
  const torch::Device device = attn::resolve_device(options.device);
  const bool is_notebook_setup = options.sentence == kDefaultSentence && options.seed == kDefaultSeed;

  section("1. Sentence -> token ids (notebook 000)");
  const std::vector<std::string> words = tokenize(options.sentence);
  const auto vocabulary = build_vocabulary(words);
  std::vector<std::string> entries;
  for (const auto& [word, id] : vocabulary) entries.push_back(fmt::format("{}: {}", python_repr(word), id));
  std::vector<int64_t> ids;
  for (const auto& word : words) ids.push_back(vocabulary.at(word));
  fmt::print("sentence:   \"{}\"\ndictionary: {{{}}}\ntoken ids:  [{}]\n", options.sentence, fmt::join(entries, ", "),
             fmt::join(ids, ", "));

  section("2. Embedding");
  const auto vocab_size = static_cast<int64_t>(words.size());  // max id + 1, as the notebook's Embedding(6, 16)
  torch::manual_seed(options.seed);
  torch::nn::Embedding embedding(vocab_size, kEmbedDim);
  const torch::Tensor embedded = embedding(torch::tensor(ids, torch::kLong)).detach();
  fmt::print("Embedding({}, {}) after manual_seed({}): embedded sentence {}\n", vocab_size, kEmbedDim, options.seed,
             shape(embedded));

  single_head_walkthrough(embedded, options, is_notebook_setup);
  const torch::Tensor weights = multi_head_weights(embedded, options, device);

  section("5. Attention weights per head (rows: queries, columns: keys)");
  const bool color = use_color(options);
  for (int64_t h = 0; h < options.heads; ++h) {
    fmt::print("\nhead {} of {}\n", h + 1, options.heads);
    demo::print_heatmap(weights[h], words, color);
  }
  if (color) demo::print_legend();

  if (!options.svg_path.empty()) {
    attn::io::write_file_atomically(options.svg_path, demo::render_svg(weights, words, options.causal));
    fmt::print("\nwrote {}\n", options.svg_path);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return attn_apps::run_main("attn-demo", kUsage, [&] { return run(parse_args(argc, argv)); });
}
