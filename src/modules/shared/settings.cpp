#include "modules/shared/settings.h"

#include "common/alibi_slopes.h"

#include <c10/util/Exception.h>

#include <cctype>
#include <cmath>
#include <limits>
#include <sstream>

namespace attn::modules {

SdpaOptions sdpa_options(const AttentionOptions& attention, bool training, const ScoreTerms& terms) {
  SdpaOptions options = SdpaOptions().attention(attention).dropout(training ? attention.dropout() : 0.0);
  // The slopes are a handful of numbers made per call on the module's device, not module state: a cache would
  // need a lock (threads share a module), and a buffer would put them in the state_dict.
  if (terms.alibi) {
    const auto dtype = terms.parameters.dtype() == torch::kFloat64 ? torch::kFloat64 : torch::kFloat32;
    options.alibi_slopes(
        common::standard_alibi_slopes("attn: alibi", terms.num_heads, terms.parameters.device()).to(dtype));
  }
  if (terms.sinks.defined()) options.sinks(terms.sinks);
  return options;
}

torch::nn::Linear register_projection(torch::nn::Module& module, const char* owner, const std::string& name, int64_t in,
                                      int64_t out, bool bias) {
  torch::nn::Linear linear{nullptr};
  try {
    linear = torch::nn::Linear(torch::nn::LinearOptions(in, out).bias(bias));
  } catch (const c10::Error& e) {
    TORCH_CHECK(false, owner, ": cannot create ", name, ", a Linear of in_features ", in, " and out_features ", out,
                " (a weight of [", out, ", ", in, "]): ", e.what_without_backtrace());
  }
  return module.register_module(name, linear);
}

void check_not_built(const torch::nn::Module& module, const char* owner) {
  TORCH_CHECK(module.named_parameters(/*recurse=*/false).is_empty() && module.named_children().is_empty(), owner,
              ": reset() builds the module once, from its options, and cannot run again on a built module; to "
              "change its options, build a new module with them");
}

void check_built_with(const char* module, std::initializer_list<BuiltValue> values) {
  for (const BuiltValue& v : values) {
    TORCH_CHECK(v.built == v.now, module, ": options.", v.name, " is ", v.now, " but the module was built with ",
                v.built, ", and its parameters are laid out for that; build a new module with the new options");
  }
}

torch::Tensor register_sinks(torch::nn::Module& module, bool sinks, int64_t num_heads) {
  if (!sinks) return {};
  return module.register_parameter("sinks", torch::zeros({num_heads}));
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

std::string describe(const ScoreTerms& terms) {
  std::string s;
  if (terms.alibi) s += ", alibi=true";
  if (terms.sinks.defined()) s += ", sinks=true";
  return s;
}

}  // namespace attn::modules
