#pragma once
// The attn::flash_attention ops' schemas (registration.cpp) as C++ function types, and the only code that
// spells their flat argument lists: on the callers' side, a FlashArguments flattened into the dispatcher call
// (call_forward, call_backward); on the kernels' side, an adaptor that gives a kernel written against
// FlashArguments the schema's flat signature (ForwardKernel, BackwardKernel), so every kernel (CPU, CUDA, Meta,
// Autograd) takes the arguments as one value.

#include <attn/ops/flash_arguments.h>

#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/util/Optional.h>

#include <tuple>

namespace attn::ops {

using OptionalTensor = c10::optional<at::Tensor>;
using ForwardResult = std::tuple<at::Tensor, at::Tensor>;
using BackwardResult = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor>;

/// attn::flash_attention(query, key, value, <FlashArguments' fields in order>).
using FlashForwardSchema = ForwardResult(const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                         const OptionalTensor&, const OptionalTensor&, const OptionalTensor&, bool,
                                         c10::SymInt, c10::optional<double>, int64_t, int64_t, double,
                                         const OptionalTensor&, const OptionalTensor&, const OptionalTensor&,
                                         const OptionalTensor&);
/// attn::flash_attention_backward(grad_output, query, key, value, output, logsumexp, <the same fields>).
using FlashBackwardSchema = BackwardResult(const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                           const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                           const OptionalTensor&, const OptionalTensor&, const OptionalTensor&, bool,
                                           c10::SymInt, c10::optional<double>, int64_t, int64_t, double,
                                           const OptionalTensor&, const OptionalTensor&, const OptionalTensor&,
                                           const OptionalTensor&);

inline ForwardResult call_forward(const c10::TypedOperatorHandle<FlashForwardSchema>& op, const at::Tensor& query,
                                  const at::Tensor& key, const at::Tensor& value, const FlashArguments& a) {
  return op.call(query, key, value, a.key_padding_mask, a.attend_mask, a.additive_mask, a.is_causal,
                 a.causal_offset, a.scale, a.window_left, a.window_right, a.softcap, a.alibi_slopes, a.sinks,
                 a.cu_seqlens_q, a.cu_seqlens_k);
}

inline BackwardResult call_backward(const c10::TypedOperatorHandle<FlashBackwardSchema>& op,
                                    const at::Tensor& grad_output, const at::Tensor& query, const at::Tensor& key,
                                    const at::Tensor& value, const at::Tensor& output, const at::Tensor& logsumexp,
                                    const FlashArguments& a) {
  return op.call(grad_output, query, key, value, output, logsumexp, a.key_padding_mask, a.attend_mask,
                 a.additive_mask, a.is_causal, a.causal_offset, a.scale, a.window_left, a.window_right, a.softcap,
                 a.alibi_slopes, a.sinks, a.cu_seqlens_q, a.cu_seqlens_k);
}

/// A forward kernel Kernel(query, key, value, const FlashArguments&) as the schema's flat function, for
/// TORCH_FN(ForwardKernel<Kernel>::call).
template <ForwardResult (*Kernel)(const at::Tensor&, const at::Tensor&, const at::Tensor&, const FlashArguments&)>
struct ForwardKernel {
  static ForwardResult call(const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
                            const OptionalTensor& key_padding_mask, const OptionalTensor& attend_mask,
                            const OptionalTensor& additive_mask, bool is_causal, c10::SymInt causal_offset,
                            c10::optional<double> scale, int64_t window_left, int64_t window_right, double softcap,
                            const OptionalTensor& alibi_slopes, const OptionalTensor& sinks,
                            const OptionalTensor& cu_seqlens_q, const OptionalTensor& cu_seqlens_k) {
    return Kernel(query, key, value,
                  FlashArguments{key_padding_mask, attend_mask, additive_mask, is_causal, std::move(causal_offset),
                                 scale, window_left, window_right, softcap, alibi_slopes, sinks, cu_seqlens_q,
                                 cu_seqlens_k});
  }
};

/// The same for a backward kernel Kernel(grad_output, query, key, value, output, logsumexp, arguments).
template <BackwardResult (*Kernel)(const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                   const at::Tensor&, const at::Tensor&, const FlashArguments&)>
struct BackwardKernel {
  static BackwardResult call(const at::Tensor& grad_output, const at::Tensor& query, const at::Tensor& key,
                             const at::Tensor& value, const at::Tensor& output, const at::Tensor& logsumexp,
                             const OptionalTensor& key_padding_mask, const OptionalTensor& attend_mask,
                             const OptionalTensor& additive_mask, bool is_causal, c10::SymInt causal_offset,
                             c10::optional<double> scale, int64_t window_left, int64_t window_right, double softcap,
                             const OptionalTensor& alibi_slopes, const OptionalTensor& sinks,
                             const OptionalTensor& cu_seqlens_q, const OptionalTensor& cu_seqlens_k) {
    return Kernel(grad_output, query, key, value, output, logsumexp,
                  FlashArguments{key_padding_mask, attend_mask, additive_mask, is_causal, std::move(causal_offset),
                                 scale, window_left, window_right, softcap, alibi_slopes, sinks, cu_seqlens_q,
                                 cu_seqlens_k});
  }
};

}  // namespace attn::ops
