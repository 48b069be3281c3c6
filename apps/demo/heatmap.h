#pragma once
// attn-demo's terminal heatmap of one head's attention weights: a row per query token, a column per key token,
// each cell the weight to two decimals, coloured with the ramp when the terminal takes colour.

#include <ATen/core/Tensor.h>

#include <string>
#include <vector>

namespace demo {

/// weights [T, T] (double, on the CPU); rows are queries, columns keys.
void print_heatmap(const at::Tensor& weights, const std::vector<std::string>& tokens, bool color);

/// The colour ramp from 0 to 1, for reading a coloured heatmap.
void print_legend();

}  // namespace demo
