#pragma once
// attn-demo's SVG image of every head's attention weights: one heatmap panel per head, in a grid of up to four
// columns, above a legend; a standalone SVG 1.1 document.

#include <ATen/core/Tensor.h>

#include <string>
#include <vector>

namespace demo {

/// weights [H, T, T] (double, on the CPU); rows are queries, columns keys. `causal` goes into the title.
std::string render_svg(const at::Tensor& weights, const std::vector<std::string>& tokens, bool causal);

}  // namespace demo
