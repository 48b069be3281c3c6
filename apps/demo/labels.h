#pragma once
// Token labels for the heatmaps: words cut to a width counted in characters, not bytes (UTF-8).

#include <cstddef>
#include <string>

namespace demo {

/// The number of UTF-8 code points in `text`.
size_t code_points(const std::string& text);

/// Keeps at most `max_chars` code points (never cutting a UTF-8 character), marking a cut with an ellipsis.
std::string truncate_label(const std::string& word, size_t max_chars);

}  // namespace demo
