// attn-demo: walks through notebook 000 ("Life is short, eat dessert first") with the attn library:
// tokens -> embedding -> one attention head step by step -> multi-head attention, then shows every
// head's attention weights as a terminal heatmap and, optionally, as an SVG file.
// The app uses only the public API (<attn/...>), so it doubles as an example of it.

#include <attn/attn.h>
#include <attn/io/files.h>

#include "app_main.h"
#include "command_line.h"

#include <fmt/color.h>
#include <fmt/core.h>
#include <fmt/format.h>
#include <torch/torch.h>

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

using attn_apps::parse_integer;
using attn_apps::UsageError;

constexpr const char* kDefaultSentence = "Life is short, eat dessert first";
constexpr uint64_t kDefaultSeed = 123;
constexpr int64_t kDefaultHeads = 3;  // the notebook's `head = 3`
constexpr int64_t kMaxHeads = 64;
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
  --sentence TEXT   sentence to attend over; commas are removed, words split on whitespace
                    (default: "Life is short, eat dessert first")
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
  bool help = false;
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
    options.device = value;  // checked by attn::resolve_device, which knows what is available
  });
  command_line.add_file_option("--svg", options.svg_path);
  command_line.add_flag("--causal", [&] { options.causal = true; });
  command_line.add_flag("--no-color", [&] { options.no_color = true; });
  if (!command_line.parse(argc, argv)) {
    options.help = true;
    return options;  // help wins over anything else on the line
  }
  if (tokenize(options.sentence).empty()) throw UsageError("--sentence has no words");
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

size_t code_points(const std::string& text) {
  return static_cast<size_t>(std::count_if(text.begin(), text.end(), [](char c) {
    return (static_cast<unsigned char>(c) & 0xC0) != 0x80;  // not a UTF-8 continuation byte
  }));
}

// Keeps at most `max_chars` code points (never cutting a UTF-8 character), marking a cut with an ellipsis.
std::string truncate_label(const std::string& word, size_t max_chars) {
  if (code_points(word) <= max_chars) return word;
  size_t kept = 0, end = 0;
  for (; end < word.size(); ++end) {
    if ((static_cast<unsigned char>(word[end]) & 0xC0) != 0x80 && kept++ == max_chars - 1) break;
  }
  return word.substr(0, end) + "\u2026";
}

// ---------------------------------------------------------------------------------------------------------
// Colour: viridis (perceptually uniform, readable in grey and by colour-blind readers), 0 -> 1.

struct Rgb {
  int r, g, b;
};

Rgb ramp(double t) {
  static const Rgb kStops[] = {{68, 1, 84},    {72, 40, 120},  {62, 73, 137},  {49, 104, 142}, {38, 130, 142},
                               {31, 158, 137}, {53, 183, 121}, {110, 206, 88}, {253, 231, 37}};
  constexpr int kSegments = sizeof(kStops) / sizeof(kStops[0]) - 1;
  const double x = std::clamp(std::isfinite(t) ? t : 0.0, 0.0, 1.0) * kSegments;
  const int i = std::min(static_cast<int>(x), kSegments - 1);
  const double f = x - i;
  const auto mix = [f](int a, int b) { return static_cast<int>(std::lround(a + (b - a) * f)); };
  return {mix(kStops[i].r, kStops[i + 1].r), mix(kStops[i].g, kStops[i + 1].g), mix(kStops[i].b, kStops[i + 1].b)};
}

// Black text on light cells, white on dark ones (WCAG relative luminance, threshold where both contrast equally).
bool prefers_black_text(Rgb c) {
  const auto linear = [](int v) {
    const double s = v / 255.0;
    return s <= 0.03928 ? s / 12.92 : std::pow((s + 0.055) / 1.055, 2.4);
  };
  return 0.2126 * linear(c.r) + 0.7152 * linear(c.g) + 0.0722 * linear(c.b) > 0.179;
}

std::string hex(Rgb c) { return fmt::format("#{:02x}{:02x}{:02x}", c.r, c.g, c.b); }

// ---------------------------------------------------------------------------------------------------------
// Terminal heatmap.

constexpr size_t kLabelChars = 8;
constexpr int kCellWidth = 9;  // one column wider than the longest label, so labels never touch

std::string colored_cell(double value, bool color) {
  const std::string text = fmt::format("{:^{}}", fmt::format("{:.2f}", value), kCellWidth);
  if (!color) return text;
  const Rgb bg = ramp(value);
  const auto fg = prefers_black_text(bg) ? fmt::rgb(0, 0, 0) : fmt::rgb(255, 255, 255);
  return fmt::format(fmt::fg(fg) | fmt::bg(fmt::rgb(bg.r, bg.g, bg.b)), "{}", text);
}

// weights [T, T] on the CPU; rows are queries, columns keys.
void print_heatmap(const torch::Tensor& weights, const std::vector<std::string>& tokens, bool color) {
  const auto values = weights.accessor<double, 2>();
  std::string header = fmt::format("{:>{}} ", "", kLabelChars);
  for (const auto& token : tokens) header += fmt::format("{:^{}}", truncate_label(token, kLabelChars), kCellWidth);
  fmt::print("{}\n", header);
  for (size_t i = 0; i < tokens.size(); ++i) {
    std::string row = fmt::format("{:>{}} ", truncate_label(tokens[i], kLabelChars), kLabelChars);
    for (size_t j = 0; j < tokens.size(); ++j) row += colored_cell(values[i][j], color);
    fmt::print("{}\n", row);
  }
}

void print_legend() {
  std::string bar;
  for (int i = 0; i <= 20; ++i) {
    const Rgb c = ramp(i / 20.0);
    bar += fmt::format(fmt::bg(fmt::rgb(c.r, c.g, c.b)), " ");
  }
  fmt::print("legend: 0 {} 1\n", bar);
}

// ---------------------------------------------------------------------------------------------------------
// SVG output.

std::string xml_escape(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&apos;"; break;
      default: out += (static_cast<unsigned char>(c) < 0x20) ? '?' : c;  // control bytes are not valid XML
    }
  }
  return out;
}

// Where things go: one panel per head, in a grid of up to four columns, above a legend.
struct SvgLayout {
  static constexpr int kCell = 40, kPad = 20, kTitle = 28, kLegend = 60, kLabelChars = 12, kCharWidth = 8;
  int label_space, panel_w, panel_h, columns, width, height;

  SvgLayout(int heads, const std::vector<std::string>& tokens) {
    size_t longest = 1;
    for (const auto& token : tokens) longest = std::max(longest, code_points(truncate_label(token, kLabelChars)));
    const int count = static_cast<int>(tokens.size());
    label_space = static_cast<int>(longest) * kCharWidth + 10;  // rough text width: no font metrics here
    panel_w = label_space + count * kCell;
    panel_h = kTitle + label_space + count * kCell;
    columns = std::min(heads, 4);
    const int rows = (heads + columns - 1) / columns;
    width = std::max(kPad + columns * (panel_w + kPad), 2 * kPad + 520);  // at least as wide as the legend
    height = kPad + rows * (panel_h + kPad) + kLegend;
  }
};

using SvgOut = std::back_insert_iterator<std::string>;

// One head's heatmap: title, row labels, rotated column labels, and a coloured cell with its value per pair.
void write_svg_panel(SvgOut out, const SvgLayout& layout, const torch::TensorAccessor<double, 2>& values,
                     const std::vector<std::string>& tokens, int head, int heads) {
  constexpr int kCell = SvgLayout::kCell;
  const int px = SvgLayout::kPad + (head % layout.columns) * (layout.panel_w + SvgLayout::kPad);
  const int py = SvgLayout::kPad + (head / layout.columns) * (layout.panel_h + SvgLayout::kPad);
  const int gx = px + layout.label_space, gy = py + SvgLayout::kTitle + layout.label_space;  // grid origin
  fmt::format_to(out, "<g>\n<text x=\"{}\" y=\"{}\" font-size=\"14\" font-weight=\"bold\">head {} of {}</text>\n", px,
                 py + 18, head + 1, heads);
  const int count = static_cast<int>(tokens.size());
  for (int i = 0; i < count; ++i) {
    const std::string label = xml_escape(truncate_label(tokens[i], SvgLayout::kLabelChars));
    const int center = i * kCell + kCell / 2;
    fmt::format_to(out, "<text x=\"{}\" y=\"{}\" dy=\"0.35em\" text-anchor=\"end\">{}</text>\n", gx - 6, gy + center,
                   label);
    fmt::format_to(out, "<text transform=\"translate({},{}) rotate(-90)\" dy=\"0.35em\">{}</text>\n", gx + center,
                   gy - 6, label);
  }
  for (int i = 0; i < count; ++i) {
    for (int j = 0; j < count; ++j) {
      const Rgb fill = ramp(values[i][j]);
      const int x = gx + j * kCell, y = gy + i * kCell;
      fmt::format_to(out, "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"{}\"/>", x, y, kCell, kCell,
                     hex(fill));
      fmt::format_to(
          out,
          "<text x=\"{}\" y=\"{}\" dy=\"0.35em\" text-anchor=\"middle\" font-size=\"11\" fill=\"{}\">{:.2f}</text>\n",
          x + kCell / 2, y + kCell / 2, prefers_black_text(fill) ? "black" : "white", values[i][j]);
    }
  }
  fmt::format_to(out, "</g>\n");
}

void write_svg_legend(SvgOut out, const SvgLayout& layout) {
  const int x = SvgLayout::kPad, y = layout.height - SvgLayout::kLegend + 10;
  fmt::format_to(out, "<rect x=\"{}\" y=\"{}\" width=\"200\" height=\"12\" fill=\"url(#ramp)\"/>\n", x, y);
  fmt::format_to(out, "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">0</text>\n", x, y + 28);
  fmt::format_to(out, "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">1</text>\n", x + 200, y + 28);
  fmt::format_to(out, "<text x=\"{}\" y=\"{}\">attention weight (rows: queries, columns: keys)</text>\n", x + 215,
                 y + 11);
}

// weights [H, T, T] on the CPU -> a standalone SVG 1.1 document.
std::string render_svg(const torch::Tensor& weights, const std::vector<std::string>& tokens, bool causal) {
  const int heads = static_cast<int>(weights.size(0));
  const SvgLayout layout(heads, tokens);
  std::string svg;
  const SvgOut out(svg);
  fmt::format_to(out,
                 "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
                 "<svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\" width=\"{0}\" height=\"{1}\" "
                 "viewBox=\"0 0 {0} {1}\" font-family=\"DejaVu Sans, Arial, sans-serif\" font-size=\"12\">\n",
                 layout.width, layout.height);
  fmt::format_to(out, "<title>attn-demo: attention weights, {} head(s){}</title>\n", heads, causal ? ", causal" : "");
  // The legend's gradient samples the same ramp as the cells.
  fmt::format_to(out, "<defs><linearGradient id=\"ramp\" x1=\"0\" y1=\"0\" x2=\"1\" y2=\"0\">");
  for (int i = 0; i <= 8; ++i)
    fmt::format_to(out, "<stop offset=\"{}\" stop-color=\"{}\"/>", i / 8.0, hex(ramp(i / 8.0)));
  fmt::format_to(out, "</linearGradient></defs>\n<rect width=\"{}\" height=\"{}\" fill=\"white\"/>\n", layout.width,
                 layout.height);
  const auto values = weights.accessor<double, 3>();
  for (int h = 0; h < heads; ++h) write_svg_panel(out, layout, values[h], tokens, h, heads);
  write_svg_legend(out, layout);
  fmt::format_to(out, "</svg>\n");
  return svg;
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
    print_heatmap(weights[h], words, color);
  }
  if (color) print_legend();

  if (!options.svg_path.empty()) {
    attn::io::write_file_atomically(options.svg_path, render_svg(weights, words, options.causal));
    fmt::print("\nwrote {}\n", options.svg_path);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return attn_apps::run_main("attn-demo", [&] {
    const auto options = parse_args(argc, argv);
    if (options.help) {
      fmt::print("{}", kUsage);
      return 0;
    }
    return run(options);
  });
}
