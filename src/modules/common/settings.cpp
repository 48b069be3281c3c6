#include "modules/common/settings.h"

#include <c10/util/Exception.h>

#include <cctype>
#include <cmath>
#include <limits>
#include <sstream>

namespace attn::modules {

SdpaOptions sdpa_options(const AttentionOptions& attention, bool training) {
  return SdpaOptions().attention(attention).dropout(training ? attention.dropout() : 0.0);
}

void check_positive(const char* module, const char* option, int64_t value) {
  TORCH_CHECK(value > 0, module, ": ", option, " must be positive, got ", value);
}

void check_attention_options(const char* module, const AttentionOptions& attention) {
  const double p = attention.dropout();
  TORCH_CHECK(p >= 0.0 && p <= 1.0, module, ": dropout must be in [0, 1], got ", p);
  if (attention.scale()) {
    TORCH_CHECK(std::isfinite(*attention.scale()), module, ": scale must be finite, got ", *attention.scale());
  }
  TORCH_CHECK(attention.window_left() >= -1 && attention.window_right() >= -1, module,
              ": window_left and window_right must be >= 0, or -1 for an unbounded side, got window(",
              attention.window_left(), ", ", attention.window_right(), ")");
  TORCH_CHECK(std::isfinite(attention.softcap()) && attention.softcap() >= 0.0, module,
              ": softcap must be finite and >= 0 (0 turns it off), got ", attention.softcap());
}

int64_t checked_width(const char* module, const char* what, int64_t a, int64_t b) {
  TORCH_CHECK(a <= std::numeric_limits<int64_t>::max() / b, module, ": ", what, " = ", a, " * ", b,
              " does not fit in 64 bits");
  return a * b;
}

std::string describe(const AttentionOptions& attention) {
  std::ostringstream s;
  s << ", causal=" << bool_name(attention.causal());
  if (attention.causal() && attention.causal_alignment() == CausalAlignment::TopLeft) {
    s << ", causal_alignment=top_left";
  }
  if (attention.has_window()) {
    s << ", window=(" << attention.window_left() << ", " << attention.window_right() << ")";
  }
  if (attention.softcap() > 0.0) s << ", softcap=" << attention.softcap();
  if (attention.scale()) s << ", scale=" << *attention.scale();
  s << ", dropout=" << attention.dropout();
  if (attention.backend() != Backend::Auto) {
    std::string name = to_string(attention.backend());
    for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    s << ", backend=" << name;
  }
  return s.str();
}

}  // namespace attn::modules
