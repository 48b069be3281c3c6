#pragma once
// The modules' shared option handling: validation in reset(), the one conversion of a module's attention
// settings to the SdpaOptions it passes down, and the pieces of pretty_print.

#include <attn/options.h>

#include <torch/nn/module.h>
#include <torch/nn/modules/linear.h>
#include <torch/types.h>

#include <initializer_list>
#include <string>

namespace attn::modules {

/// The per-head score terms a module owns (its alibi and sinks options).
struct ScoreTerms {
  bool alibi = false;     ///< the standard slopes attn::alibi_slopes(num_heads)
  int64_t num_heads = 0;  ///< query heads, for the slopes
  torch::Tensor sinks;    ///< the module's `sinks` parameter [num_heads], or undefined
  /// The module's parameters: the slopes are made on their device, in float64 for a float64 module (float32
  /// would round them) and float32 otherwise (the kernels' compute type).
  torch::TensorOptions parameters;
};

/// The SdpaOptions a module attends with: its AttentionOptions, with dropout only in training mode, and its
/// score terms (a module without any passes {}).
SdpaOptions sdpa_options(const AttentionOptions& attention, bool training, const ScoreTerms& terms);

/// Creates and registers the projection `name`, a Linear of in_features `in` and out_features `out`, as reset()
/// does; LibTorch's allocation error (a size that overflows, memory that cannot be had) comes back naming the
/// module, the projection and its shape.
torch::nn::Linear register_projection(torch::nn::Module& module, const char* owner, const std::string& name, int64_t in,
                                      int64_t out, bool bias);

/// Refuses a second reset() of a built module, before anything changes: LibTorch registers each parameter and
/// submodule once (clone() empties the copy first), and a module rebuilt in place would keep half its state.
void check_not_built(const torch::nn::Module& module, const char* owner);

/// One of the options a module's parameters are laid out by: its value when reset() built them, and now.
struct BuiltValue {
  const char* name;
  int64_t built, now;
};
/// Refuses a call after such an option changed in module.options: the weights would be split into other heads
/// without any error.
void check_built_with(const char* module, std::initializer_list<BuiltValue> values);

/// Registers (or, when off, leaves out) the `sinks` parameter [num_heads] in zeros, as reset() does.
torch::Tensor register_sinks(torch::nn::Module& module, bool sinks, int64_t num_heads);

/// Validation shared by the modules' reset() (besides common::check_positive): dropout in [0, 1], a finite
/// scale.
void check_attention_options(const char* module, const AttentionOptions& attention);
/// a * b for a layer width, refusing int64 overflow; `what` spells the product, e.g. "num_heads * head_dim".
int64_t checked_width(const char* module, const char* what, int64_t a, int64_t b);

/// "true" / "false" without setting std::boolalpha on the caller's stream.
inline const char* bool_name(bool b) { return b ? "true" : "false"; }
/// ", causal=true[, causal_alignment=top_left][, scale=S], dropout=P[, backend=fused]" for pretty_print: the
/// settings that differ from their defaults, except causal and dropout, which are always shown.
std::string describe(const AttentionOptions& attention);
/// ", alibi=true" and ", sinks=true" where they are on.
std::string describe(const ScoreTerms& terms);

}  // namespace attn::modules
