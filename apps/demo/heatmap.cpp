#include "heatmap.h"

#include "color_ramp.h"
#include "labels.h"

#include <fmt/color.h>
#include <fmt/core.h>

namespace demo {
namespace {

constexpr size_t kLabelChars = 8;
constexpr int kCellWidth = 9;  // one column wider than the longest label, so labels never touch

std::string colored_cell(double value, bool color) {
  const std::string text = fmt::format("{:^{}}", fmt::format("{:.2f}", value), kCellWidth);
  if (!color) return text;
  const Rgb bg = ramp(value);
  const auto fg = prefers_black_text(bg) ? fmt::rgb(0, 0, 0) : fmt::rgb(255, 255, 255);
  return fmt::format(fmt::fg(fg) | fmt::bg(fmt::rgb(bg.r, bg.g, bg.b)), "{}", text);
}

}  // namespace

void print_heatmap(const at::Tensor& weights, const std::vector<std::string>& tokens, bool color) {
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

}  // namespace demo
