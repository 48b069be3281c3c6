// The Autograd kernel of attn::flash_attention. The forward pass saves q, k, v, the output and the per-row
// log-sum-exp (O(T) memory, no probabilities); the backward pass is the attn::flash_attention_backward op,
// which recomputes the probabilities tile by tile (FlashAttention-2).

#include <attn/ops/flash_attention.h>

#include <torch/autograd.h>
#include <torch/library.h>

namespace attn::ops {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

constexpr const char* kOp = "attn::flash_attention";

class FlashAttentionFunction : public torch::autograd::Function<FlashAttentionFunction> {
 public:
  static variable_list forward(AutogradContext* ctx, const torch::Tensor& query, const torch::Tensor& key,
                               const torch::Tensor& value, const c10::optional<torch::Tensor>& key_padding_mask,
                               const c10::optional<torch::Tensor>& attend_mask,
                               const c10::optional<torch::Tensor>& additive_mask, bool is_causal,
                               int64_t causal_offset, c10::optional<double> scale, int64_t window_left,
                               int64_t window_right, double softcap, const c10::optional<torch::Tensor>& alibi_slopes,
                               const c10::optional<torch::Tensor>& sinks,
                               const c10::optional<torch::Tensor>& cu_seqlens_q,
                               const c10::optional<torch::Tensor>& cu_seqlens_k) {
    // The kernel treats the additive mask as a constant; silently dropping its gradient would be wrong.
    TORCH_CHECK(!(additive_mask && additive_mask->defined() && additive_mask->requires_grad()), kOp,
                ": additive_mask requires grad, but this op does not differentiate with respect to it; use "
                "attn::Backend::Math for a learned bias");
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    auto [out, lse] = flash_attention(query, key, value, key_padding_mask, attend_mask, additive_mask, is_causal,
                                      causal_offset, scale, window_left, window_right, softcap, alibi_slopes, sinks,
                                      cu_seqlens_q, cu_seqlens_k);
    // sinks is an input with a gradient: saved as a variable (an empty one when absent).
    ctx->save_for_backward({query, key, value, out, lse, sinks ? *sinks : torch::Tensor()});
    ctx->saved_data["key_padding_mask"] = key_padding_mask;
    ctx->saved_data["attend_mask"] = attend_mask;
    ctx->saved_data["additive_mask"] = additive_mask;
    ctx->saved_data["is_causal"] = is_causal;
    ctx->saved_data["causal_offset"] = causal_offset;
    ctx->saved_data["scale"] = scale;
    ctx->saved_data["window_left"] = window_left;
    ctx->saved_data["window_right"] = window_right;
    ctx->saved_data["softcap"] = softcap;
    ctx->saved_data["alibi_slopes"] = alibi_slopes;
    ctx->saved_data["cu_seqlens_q"] = cu_seqlens_q;
    ctx->saved_data["cu_seqlens_k"] = cu_seqlens_k;
    ctx->mark_non_differentiable({lse});
    return {out, lse};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    // The backward op has no derivative of its own: refuse create_graph=True rather than return gradients
    // that silently lack their second-order part.
    TORCH_CHECK(!torch::GradMode::is_enabled(), kOp,
                ": double backward (create_graph=True) is not supported; use attn::Backend::Math");
    const variable_list saved = ctx->get_saved_variables();
    const torch::Tensor& grad_out = grads[0];
    variable_list result(16);
    if (!grad_out.defined()) return result;  // only the (non-differentiable) logsumexp was used
    const auto optional = [](const torch::Tensor& t) {
      return t.defined() ? c10::optional<torch::Tensor>(t) : c10::nullopt;
    };
    const auto saved_optional = [&](const char* name) { return ctx->saved_data[name].toOptional<torch::Tensor>(); };
    auto [dq, dk, dv, dsinks] = flash_attention_backward(
        grad_out, saved[0], saved[1], saved[2], saved[3], saved[4],
        ctx->saved_data["key_padding_mask"].toOptional<torch::Tensor>(),
        ctx->saved_data["attend_mask"].toOptional<torch::Tensor>(),
        ctx->saved_data["additive_mask"].toOptional<torch::Tensor>(), ctx->saved_data["is_causal"].toBool(),
        ctx->saved_data["causal_offset"].toInt(), ctx->saved_data["scale"].toOptional<double>(),
        ctx->saved_data["window_left"].toInt(), ctx->saved_data["window_right"].toInt(),
        ctx->saved_data["softcap"].toDouble(), saved_optional("alibi_slopes"), optional(saved[5]),
        saved_optional("cu_seqlens_q"), saved_optional("cu_seqlens_k"));
    result[0] = dq;
    result[1] = dk;
    result[2] = dv;
    if (saved[5].defined()) result[13] = dsinks;  // the sinks' position among forward's inputs
    return result;
  }
};

std::tuple<torch::Tensor, torch::Tensor> flash_attention_autograd(
    const torch::Tensor& query, const torch::Tensor& key, const torch::Tensor& value,
    const c10::optional<torch::Tensor>& key_padding_mask, const c10::optional<torch::Tensor>& attend_mask,
    const c10::optional<torch::Tensor>& additive_mask, bool is_causal, int64_t causal_offset,
    c10::optional<double> scale, int64_t window_left, int64_t window_right, double softcap,
    const c10::optional<torch::Tensor>& alibi_slopes, const c10::optional<torch::Tensor>& sinks,
    const c10::optional<torch::Tensor>& cu_seqlens_q, const c10::optional<torch::Tensor>& cu_seqlens_k) {
  TORCH_CHECK(!(alibi_slopes && alibi_slopes->defined() && alibi_slopes->requires_grad()), kOp,
              ": alibi_slopes requires grad, but this op does not differentiate with respect to them; use "
              "attn::Backend::Math for learned slopes");
  variable_list out = FlashAttentionFunction::apply(query, key, value, key_padding_mask, attend_mask, additive_mask,
                                                    is_causal, causal_offset, scale, window_left, window_right,
                                                    softcap, alibi_slopes, sinks, cu_seqlens_q, cu_seqlens_k);
  return {out[0], out[1]};
}

/// The backward op has no derivative of its own. Its Autograd kernel refuses a call that would need one, and
/// otherwise passes the call on (an explicit kernel, because LibTorch 1.13 has no autograd fallthrough for
/// custom ops on every device, e.g. the meta device).
std::tuple<torch::Tensor, torch::Tensor, torch::Tensor, torch::Tensor> flash_attention_backward_autograd(
    const torch::Tensor& grad_output, const torch::Tensor& query, const torch::Tensor& key,
    const torch::Tensor& value, const torch::Tensor& output, const torch::Tensor& logsumexp,
    const c10::optional<torch::Tensor>& key_padding_mask, const c10::optional<torch::Tensor>& attend_mask,
    const c10::optional<torch::Tensor>& additive_mask, bool is_causal, int64_t causal_offset,
    c10::optional<double> scale, int64_t window_left, int64_t window_right, double softcap,
    const c10::optional<torch::Tensor>& alibi_slopes, const c10::optional<torch::Tensor>& sinks,
    const c10::optional<torch::Tensor>& cu_seqlens_q, const c10::optional<torch::Tensor>& cu_seqlens_k) {
  const bool needs_grad = torch::GradMode::is_enabled() &&
                          (grad_output.requires_grad() || query.requires_grad() || key.requires_grad() ||
                           value.requires_grad() || output.requires_grad() ||
                           (sinks && sinks->defined() && sinks->requires_grad()));
  TORCH_CHECK(!needs_grad, "attn::flash_attention_backward is not differentiable (double backward); use "
                           "attn::Backend::Math");
  at::AutoDispatchBelowADInplaceOrView below_autograd;
  return flash_attention_backward(grad_output, query, key, value, output, logsumexp, key_padding_mask, attend_mask,
                                  additive_mask, is_causal, causal_offset, scale, window_left, window_right, softcap,
                                  alibi_slopes, sinks, cu_seqlens_q, cu_seqlens_k);
}

}  // namespace

TORCH_LIBRARY_IMPL(attn, Autograd, m) {
  m.impl("flash_attention", TORCH_FN(flash_attention_autograd));
  m.impl("flash_attention_backward", TORCH_FN(flash_attention_backward_autograd));
}

}  // namespace attn::ops
