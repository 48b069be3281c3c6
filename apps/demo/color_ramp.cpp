#include "color_ramp.h"

#include <fmt/core.h>

#include <algorithm>
#include <cmath>

namespace demo {

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

bool prefers_black_text(Rgb c) {
  const auto linear = [](int v) {
    const double s = v / 255.0;
    return s <= 0.03928 ? s / 12.92 : std::pow((s + 0.055) / 1.055, 2.4);
  };
  return 0.2126 * linear(c.r) + 0.7152 * linear(c.g) + 0.0722 * linear(c.b) > 0.179;
}

std::string hex(Rgb c) { return fmt::format("#{:02x}{:02x}{:02x}", c.r, c.g, c.b); }

}  // namespace demo
