#pragma once
// attn-demo's colours for attention weights: viridis (perceptually uniform, readable in grey and by
// colour-blind readers), 0 -> 1. The terminal heatmap and the SVG use the same ramp.

#include <string>

namespace demo {

struct Rgb {
  int r, g, b;
};

/// The ramp's colour at t, clamped to [0, 1] (NaN and infinities as 0).
Rgb ramp(double t);

/// Black text on light cells, white on dark ones (WCAG relative luminance, threshold where both contrast equally).
bool prefers_black_text(Rgb c);

/// "#rrggbb".
std::string hex(Rgb c);

}  // namespace demo
