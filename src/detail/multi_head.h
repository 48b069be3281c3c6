#pragma once
// What the three modules share: checking module inputs, projecting them into heads, attending, and
// merging the heads back. Each module only describes its own layout and options.

#include <attn/options.h>

#include <torch/nn/modules/linear.h>
#include <torch/types.h>

#include <string>
#include <tuple>

namespace attn::detail {

/// How a module lays its inputs out.
struct HeadLayout {
  const char* module;  ///< for messages, e.g. "attn::MultiHeadAttention"
  const char* query_name;
  const char* key_name;
  const char* value_name;
  int64_t query_width;
  int64_t key_width;
  int64_t value_width;
  int64_t num_heads;
};

/// Checks the inputs against the layout and the projections' parameters, then returns
/// (output [B, Tq, H * d_v], weights [B, H, Tq, Tk] or undefined), without B for unbatched inputs.
std::tuple<torch::Tensor, torch::Tensor> project_and_attend(const HeadLayout& layout, const torch::Tensor& query,
                                                            const torch::Tensor& key, const torch::Tensor& value,
                                                            torch::nn::Linear& q_proj, torch::nn::Linear& k_proj,
                                                            torch::nn::Linear& v_proj, const AttentionMasks& masks,
                                                            const SdpaOptions& base, bool need_weights);

/// The SdpaOptions a module passes down: its causal settings, and its dropout only in training mode.
SdpaOptions module_sdpa_options(bool causal, CausalAlignment alignment, double dropout, Backend backend,
                                bool training);

/// [B, H, Tq, Tk] (or [H, Tq, Tk]) per-head weights in the form the caller asked for.
torch::Tensor select_head_weights(const torch::Tensor& per_head, HeadWeights head_weights);

/// Options validation shared by the modules' reset().
void check_positive(const char* module, const char* option, int64_t value);
/// a * b for a layer width, refusing int64 overflow; `what` spells the product, e.g. "num_heads * head_dim".
int64_t checked_width(const char* module, const char* what, int64_t a, int64_t b);
/// "true" / "false" without setting std::boolalpha on the caller's stream.
inline const char* bool_name(bool b) { return b ? "true" : "false"; }
/// ", causal=true[, causal_alignment=top_left]" for pretty_print.
std::string causal_description(bool causal, CausalAlignment alignment);
void check_dropout(const char* module, double p);
/// ", backend=fused" (math, torch) for pretty_print; empty for the default, Auto.
std::string backend_description(Backend backend);

}  // namespace attn::detail
