#include "svg.h"

#include "color_ramp.h"
#include "labels.h"

#include <fmt/format.h>

#include <algorithm>
#include <iterator>

namespace demo {
namespace {

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
void write_svg_panel(SvgOut out, const SvgLayout& layout, const at::TensorAccessor<double, 2>& values,
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

}  // namespace

std::string render_svg(const at::Tensor& weights, const std::vector<std::string>& tokens, bool causal) {
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

}  // namespace demo
