// The Autograd kernel of attn::flash_attention. The forward pass saves q, k, v, the output and the per-row
// log-sum-exp (O(T) memory, no probabilities), and the call's FlashArguments; the backward pass is the
// attn::flash_attention_backward op, which recomputes the probabilities tile by tile (FlashAttention-2).

#include <attn/ops/flash_attention.h>

#include "ops/flash_attention_schema.h"

#include <torch/autograd.h>
#include <torch/custom_class.h>
#include <torch/library.h>

#include <array>

namespace attn::ops {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

constexpr const char* kOp = "attn::flash_attention";
// Where a gradient this op does not compute can be had: C++ users and Python users (torch.ops.attn) read the same
// messages.
constexpr const char* kDifferentiableElsewhere =
    "attn::Backend::Math in C++, or torch.nn.functional.scaled_dot_product_attention from Python";

/// A call's arguments kept for its backward pass, less their tensors, which save_for_backward keeps: the
/// backward recomputes the probabilities from the masks, the slopes and the packed boundaries, so one of them
/// changed in place after the forward must fail autograd's version check, as it would in PyTorch's own ops,
/// rather than give the gradients of other probabilities.
struct SavedArguments : torch::CustomClassHolder {
  explicit SavedArguments(FlashArguments a) : arguments(std::move(a)) {}
  FlashArguments arguments;
};

/// FlashArguments' tensors, in the order they are saved after the Saved variables.
std::array<c10::optional<torch::Tensor>*, 6> argument_tensors(FlashArguments& a) {
  return {&a.key_padding_mask, &a.attend_mask, &a.additive_mask, &a.alibi_slopes, &a.cu_seqlens_q, &a.cu_seqlens_k};
}

class FlashAttentionFunction : public torch::autograd::Function<FlashAttentionFunction> {
 public:
  /// The inputs of forward() after the context, in order; backward() returns one gradient per input.
  enum Input { kQuery, kKey, kValue, kSinks, kArguments, kInputCount };
  /// The variables save_for_backward keeps, in order.
  /// The arguments' tensors follow (argument_tensors).
  enum Saved { kSavedQuery, kSavedKey, kSavedValue, kSavedOutput, kSavedLogsumexp, kSavedSinks, kSavedArguments };

  /// `sinks` is arguments.sinks passed apart, so that autograd tracks it as an input.
  static variable_list forward(AutogradContext* ctx, const torch::Tensor& query, const torch::Tensor& key,
                               const torch::Tensor& value, const c10::optional<torch::Tensor>& sinks,
                               const FlashArguments& arguments) {
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    auto [out, lse] = flash_attention(query, key, value, arguments);
    variable_list saved = {query, key, value, out, lse, sinks ? *sinks : torch::Tensor()};
    auto kept = c10::make_intrusive<SavedArguments>(arguments);
    for (c10::optional<torch::Tensor>* tensor : argument_tensors(kept->arguments)) {
      saved.push_back(*tensor ? **tensor : torch::Tensor());
      if (*tensor) **tensor = torch::Tensor();  // held by save_for_backward alone, never past its check
    }
    ctx->save_for_backward(saved);
    ctx->saved_data["arguments"] = c10::IValue::make_capsule(std::move(kept));
    ctx->mark_non_differentiable({lse});
    return {out, lse};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    // The backward op has no derivative of its own: refuse create_graph=True rather than return gradients
    // that silently lack their second-order part.
    TORCH_CHECK(!torch::GradMode::is_enabled(), kOp,
                ": double backward (create_graph=True) is not supported; use ", kDifferentiableElsewhere);
    const variable_list saved = ctx->get_saved_variables();
    const torch::Tensor& grad_out = grads[0];
    variable_list result(kInputCount);
    if (!grad_out.defined()) return result;  // only the (non-differentiable) logsumexp was used
    const auto capsule = ctx->saved_data["arguments"].toCapsule();
    FlashArguments arguments = static_cast<const SavedArguments*>(capsule.get())->arguments;
    size_t next = kSavedArguments;
    for (c10::optional<torch::Tensor>* tensor : argument_tensors(arguments)) {
      const torch::Tensor& kept = saved[next++];
      if (*tensor) **tensor = kept;
    }
    auto [dq, dk, dv, dsinks] =
        flash_attention_backward(grad_out, saved[kSavedQuery], saved[kSavedKey], saved[kSavedValue],
                                 saved[kSavedOutput], saved[kSavedLogsumexp], arguments);
    result[kQuery] = dq;
    result[kKey] = dk;
    result[kValue] = dv;
    if (saved[kSavedSinks].defined()) result[kSinks] = dsinks;
    return result;
  }
};

std::tuple<torch::Tensor, torch::Tensor> flash_attention_autograd(const torch::Tensor& query,
                                                                  const torch::Tensor& key,
                                                                  const torch::Tensor& value,
                                                                  const FlashArguments& arguments) {
  // The kernel treats the additive mask and the slopes as constants; silently dropping their gradients would
  // be wrong. Without grad mode nothing records gradients, so they are constants indeed.
  const bool grad_mode = torch::GradMode::is_enabled();
  TORCH_CHECK(!(grad_mode && arguments.additive_mask && arguments.additive_mask->defined() &&
                arguments.additive_mask->requires_grad()),
              kOp,
              ": additive_mask requires grad, but this op does not differentiate with respect to it; for a learned "
              "bias use ", kDifferentiableElsewhere);
  TORCH_CHECK(!(grad_mode && arguments.has_alibi() && arguments.alibi_slopes->requires_grad()), kOp,
              ": alibi_slopes requires grad, but this op does not differentiate with respect to them; for learned "
              "slopes use ", kDifferentiableElsewhere, " with the bias they make");
  variable_list out = FlashAttentionFunction::apply(query, key, value, arguments.sinks, arguments);
  return {out[0], out[1]};
}

/// The backward op has no derivative of its own. Its Autograd kernel refuses a call that would need one, and
/// otherwise passes the call on (an explicit kernel, because LibTorch 1.13 has no autograd fallthrough for
/// custom ops on every device, e.g. the meta device).
std::tuple<torch::Tensor, torch::Tensor, torch::Tensor, torch::Tensor> flash_attention_backward_autograd(
    const torch::Tensor& grad_output, const torch::Tensor& query, const torch::Tensor& key,
    const torch::Tensor& value, const torch::Tensor& output, const torch::Tensor& logsumexp,
    const FlashArguments& arguments) {
  const bool needs_grad = torch::GradMode::is_enabled() &&
                          (grad_output.requires_grad() || query.requires_grad() || key.requires_grad() ||
                           value.requires_grad() || output.requires_grad() ||
                           (arguments.has_sinks() && arguments.sinks->requires_grad()));
  TORCH_CHECK(!needs_grad, "attn::flash_attention_backward is not differentiable (double backward); use ",
              kDifferentiableElsewhere);
  at::AutoDispatchBelowADInplaceOrView below_autograd;
  return flash_attention_backward(grad_output, query, key, value, output, logsumexp, arguments);
}

}  // namespace

TORCH_LIBRARY_IMPL(attn, Autograd, m) {
  m.impl("flash_attention", TORCH_FN(ForwardKernel<flash_attention_autograd>::call));
  m.impl("flash_attention_backward", TORCH_FN(BackwardKernel<flash_attention_backward_autograd>::call));
}

}  // namespace attn::ops
