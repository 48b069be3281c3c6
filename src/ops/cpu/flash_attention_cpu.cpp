// The CPU implementation of the attn::flash_attention ops: checks the arguments (ops/flash_attention_contract.h),
// lays the tensors out for the kernels and calls the variant for this CPU.

#include "ops/cpu/flash_attention_kernel.h"
#include "ops/cpu/kernel_layout.h"
#include "ops/flash_attention_contract.h"

#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <tuple>
#include <type_traits>
#include <vector>

namespace attn::ops::cpu {
namespace {

/// `t` in the compute type, in a layout the kernels can read (ops/cpu/kernel_layout.h).
at::Tensor kernel_layout(const at::Tensor& t, at::ScalarType compute) {
  return row_major_layout(t.scalar_type() == compute ? t : t.to(compute));
}

template <typename T>
View4<const T> input_view(const at::Tensor& t) {
  return {t.data_ptr<T>(), t.stride(0), t.stride(1), t.stride(2), 1};
}

template <typename T>
View4<T> output_view(at::Tensor& t) {
  return {t.data_ptr<T>(), t.stride(0), t.stride(1), t.stride(2), 1};
}

/// The masks, broadcast by strides (no copies) to the kernels' [B, H, Tq|1, Tk] views.
struct KernelMasks {
  at::Tensor padding, attend, additive;

  KernelMasks(const FlashSizes& s, const c10::optional<at::Tensor>& pad, const c10::optional<at::Tensor>& att,
              const c10::optional<at::Tensor>& add, at::ScalarType compute) {
    if (pad && pad->defined()) padding = pad->expand({s.batch, s.heads, s.tk}).unsqueeze(2);
    if (att && att->defined()) attend = att->expand({s.batch, s.heads, s.tq, s.tk});
    // Convert before broadcasting: converting a broadcast view would materialise it.
    if (add && add->defined()) additive = add->to(compute).expand({s.batch, s.heads, s.tq, s.tk});
  }

  template <typename T, typename In>
  void fill(FlashProblem<T, In>& p) const {
    if (padding.defined()) {
      p.key_padding = {padding.data_ptr<bool>(), padding.stride(0), padding.stride(1), 0, padding.stride(3)};
    }
    if (attend.defined()) {
      p.attend = {attend.data_ptr<bool>(), attend.stride(0), attend.stride(1), attend.stride(2), attend.stride(3)};
    }
    if (additive.defined()) {
      p.additive = {additive.data_ptr<T>(), additive.stride(0), additive.stride(1), additive.stride(2),
                    additive.stride(3)};
    }
  }
};

/// The variant arguments in the kernels' form: per-head terms in the compute type, packed boundaries as int64.
struct KernelVariants {
  int64_t window_left = -1, window_right = -1;
  double softcap = 0.0;
  at::Tensor alibi, sinks, cu_seqlens_q, cu_seqlens_k;
  int64_t sequences = 0;

  KernelVariants(int64_t left, int64_t right, double cap, const c10::optional<at::Tensor>& alibi_slopes,
                 const c10::optional<at::Tensor>& sink_logits, const c10::optional<at::Tensor>& cu_q,
                 const c10::optional<at::Tensor>& cu_k, int64_t packed, at::ScalarType compute)
      : window_left(left), window_right(right), softcap(cap), sequences(packed) {
    if (alibi_slopes && alibi_slopes->defined()) alibi = alibi_slopes->to(compute).contiguous();
    if (sink_logits && sink_logits->defined()) sinks = sink_logits->to(compute).contiguous();
    if (packed > 0) cu_seqlens_q = cu_q->contiguous(), cu_seqlens_k = cu_k->contiguous();
  }

  template <typename T, typename In>
  void fill(FlashProblem<T, In>& p) const {
    p.window_left = window_left, p.window_right = window_right;
    p.softcap = static_cast<T>(softcap);
    if (alibi.defined()) {
      p.alibi = alibi.data_ptr<T>();
      p.alibi_stride = alibi.dim() == 2 && alibi.size(0) > 1 ? alibi.size(1) : 0;
    }
    if (sinks.defined()) p.sinks = sinks.data_ptr<T>();
    if (sequences > 0) {
      p.cu_seqlens_q = cu_seqlens_q.data_ptr<int64_t>();
      p.cu_seqlens_k = cu_seqlens_k.data_ptr<int64_t>();
      p.sequences = sequences;
    }
  }
};

template <typename T, typename In = T>
FlashProblem<T, In> make_problem(const FlashSizes& s, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                 const KernelMasks& masks, const KernelVariants& variants, bool is_causal,
                                 int64_t causal_offset, double scale) {
  FlashProblem<T, In> p;
  p.batch = s.batch, p.heads = s.heads, p.tq = s.tq, p.tk = s.tk, p.dk = s.dk, p.dv = s.dv;
  p.kv_heads = s.kv_heads;
  p.q = input_view<In>(q), p.k = input_view<In>(k), p.v = input_view<In>(v);
  masks.fill(p);
  variants.fill(p);
  p.causal = is_causal;
  p.causal_offset = causal_offset;
  p.scale = static_cast<T>(scale);
  return p;
}

/// Whether the forward pass takes the bfloat16 route (Capability::Avx512Bf16): bfloat16 inputs multiplied
/// as bfloat16 pairs, instead of widened to float for the float kernel. The pairs of Q·Kᵀ run along d_k, so it
/// must be even.
bool bfloat16_route(const at::Tensor& query, const FlashSizes& s) {
  return query.scalar_type() == at::kBFloat16 && s.dk % 2 == 0 && bf16_route_chosen();
}

std::tuple<at::Tensor, at::Tensor> flash_attention_cpu(
    const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
    const c10::optional<at::Tensor>& key_padding_mask, const c10::optional<at::Tensor>& attend_mask,
    const c10::optional<at::Tensor>& additive_mask, bool is_causal, int64_t causal_offset,
    c10::optional<double> scale, int64_t window_left, int64_t window_right, double softcap,
    const c10::optional<at::Tensor>& alibi_slopes, const c10::optional<at::Tensor>& sinks,
    const c10::optional<at::Tensor>& cu_seqlens_q, const c10::optional<at::Tensor>& cu_seqlens_k) {
  const FlashSizes s =
      check_forward_args(kForwardOp, query, key, value, key_padding_mask, attend_mask, additive_mask, scale);
  const int64_t packed = check_variant_args(kForwardOp, s, query, any_mask(key_padding_mask, attend_mask, additive_mask),
                                            causal_offset, window_left, window_right, softcap, alibi_slopes, sinks,
                                            cu_seqlens_q, cu_seqlens_k);
  const double sc = resolved_scale(scale, s.dk);
  const at::ScalarType compute = compute_type(query);
  const KernelMasks masks(s, key_padding_mask, attend_mask, additive_mask, compute);
  const KernelVariants variants(window_left, window_right, softcap, alibi_slopes, sinks, cu_seqlens_q, cu_seqlens_k,
                                packed, compute);
  if (bfloat16_route(query, s)) {
    const at::Tensor q = row_major_layout(query), k = row_major_layout(key), v = row_major_layout(value);
    at::Tensor out, lse;
    std::tie(out, lse) = empty_forward_results(s, q.options(), compute);
    FlashForward<float, c10::BFloat16> args;
    args.problem = make_problem<float, c10::BFloat16>(s, q, k, v, masks, variants, is_causal, causal_offset, sc);
    args.out = output_view<c10::BFloat16>(out);
    args.lse = lse.data_ptr<float>();
    flash_forward(args);
    return {out, lse};
  }
  const at::Tensor q = kernel_layout(query, compute), k = kernel_layout(key, compute),
                   v = kernel_layout(value, compute);

  at::Tensor out, lse;  // not a structured binding: C++17 lambdas (the dispatch below) cannot capture those
  std::tie(out, lse) = empty_forward_results(s, q.options(), compute);
  AT_DISPATCH_FLOATING_TYPES(compute, "attn::flash_attention", [&] {
    FlashForward<scalar_t> args;
    args.problem = make_problem<scalar_t>(s, q, k, v, masks, variants, is_causal, causal_offset, sc);
    args.out = output_view<scalar_t>(out);
    args.lse = lse.data_ptr<scalar_t>();
    flash_forward(args);
  });
  if (query.scalar_type() != compute) out = out.to(query.scalar_type());
  return {out, lse};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> flash_attention_backward_cpu(
    const at::Tensor& grad_output, const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
    const at::Tensor& output, const at::Tensor& logsumexp, const c10::optional<at::Tensor>& key_padding_mask,
    const c10::optional<at::Tensor>& attend_mask, const c10::optional<at::Tensor>& additive_mask, bool is_causal,
    int64_t causal_offset, c10::optional<double> scale, int64_t window_left, int64_t window_right, double softcap,
    const c10::optional<at::Tensor>& alibi_slopes, const c10::optional<at::Tensor>& sinks,
    const c10::optional<at::Tensor>& cu_seqlens_q, const c10::optional<at::Tensor>& cu_seqlens_k) {
  const FlashSizes s = check_backward_args(grad_output, query, key, value, output, logsumexp, key_padding_mask,
                                           attend_mask, additive_mask, scale);
  const int64_t packed = check_variant_args(kBackwardOp, s, query, any_mask(key_padding_mask, attend_mask, additive_mask),
                                            causal_offset, window_left, window_right, softcap, alibi_slopes, sinks,
                                            cu_seqlens_q, cu_seqlens_k);
  const at::ScalarType compute = compute_type(query);
  const double sc = resolved_scale(scale, s.dk);
  // The bfloat16 route reads the inputs as bfloat16 pairs, dO included (a dO of another dtype widens); d_v is
  // the length of dO·Vᵀ's pairs, so it must be even as well.
  const bool pairs = bfloat16_route(query, s) && s.dv % 2 == 0 && grad_output.scalar_type() == at::kBFloat16;
  const auto layout = [&](const at::Tensor& t) { return pairs ? row_major_layout(t) : kernel_layout(t, compute); };
  const at::Tensor q = layout(query), k = layout(key), v = layout(value), dout = layout(grad_output);
  const at::Tensor lse = logsumexp.contiguous();
  // delta_i = Σ_c dO[i,c]·O[i,c] = Σ_j P[i,j]·dP[i,j]: the softmax backward's row term, O(T) to precompute.
  const at::Tensor delta = (dout.to(compute) * output.to(compute)).sum(-1).contiguous();
  const KernelMasks masks(s, key_padding_mask, attend_mask, additive_mask, compute);
  const KernelVariants variants(window_left, window_right, softcap, alibi_slopes, sinks, cu_seqlens_q, cu_seqlens_k,
                                packed, compute);

  // Key blocks are split among enough tasks to keep the threads busy; each split owns a dQ slice, summed
  // in a fixed order. The split count does not depend on the thread count, so gradients are bitwise the
  // same whatever at::set_num_threads says.
  int64_t longest_keys = s.tk;
  if (packed > 0) {
    const at::Tensor lengths = variants.cu_seqlens_k.narrow(0, 1, packed) - variants.cu_seqlens_k.narrow(0, 0, packed);
    longest_keys = lengths.max().item<int64_t>();
  }
  const int64_t k_blocks = (longest_keys + kBackwardKeyBlock - 1) / kBackwardKeyBlock;
  const int64_t heads_total = std::max<int64_t>((packed > 0 ? packed : s.batch) * s.kv_heads, 1);
  constexpr int64_t kMinTasks = 16;
  const int64_t wanted = (kMinTasks + heads_total - 1) / heads_total;
  const int64_t splits = std::clamp<int64_t>(wanted, 1, std::max<int64_t>(k_blocks, 1));

  // The gradients accumulate in the compute type on either route.
  const at::TensorOptions grad_options = q.options().dtype(compute);
  at::Tensor grad_q = at::zeros({splits * s.batch, s.heads, s.tq, s.dk}, grad_options);
  at::Tensor grad_k = at::empty({s.batch, s.kv_heads, s.tk, s.dk}, grad_options);
  at::Tensor grad_v = at::empty({s.batch, s.kv_heads, s.tk, s.dv}, grad_options);
  const auto fill = [&](auto& args) {
    using T = std::remove_const_t<std::remove_pointer_t<decltype(args.lse)>>;
    args.lse = lse.data_ptr<T>();
    args.delta = delta.data_ptr<T>();
    args.grad_q = output_view<T>(grad_q);
    args.splits = splits;
    args.grad_k = output_view<T>(grad_k);
    args.grad_v = output_view<T>(grad_v);
  };
  if (pairs) {
    FlashBackward<float, c10::BFloat16> args;
    args.problem = make_problem<float, c10::BFloat16>(s, q, k, v, masks, variants, is_causal, causal_offset, sc);
    args.grad_out = input_view<c10::BFloat16>(dout);
    fill(args);
    flash_backward(args);
  } else {
    AT_DISPATCH_FLOATING_TYPES(compute, "attn::flash_attention_backward", [&] {
      FlashBackward<scalar_t> args;
      args.problem = make_problem<scalar_t>(s, q, k, v, masks, variants, is_causal, causal_offset, sc);
      args.grad_out = input_view<scalar_t>(dout);
      fill(args);
      flash_backward(args);
    });
  }
  if (splits > 1) grad_q = grad_q.view({splits, s.batch, s.heads, s.tq, s.dk}).sum(0);
  const auto back = [&](const at::Tensor& g) {
    return query.scalar_type() == compute ? g : g.to(query.scalar_type());
  };
  // d sink_h = -Σ_{b,i} p_sink(b,h,i) · delta(b,h,i), p_sink = exp(sink_h - lse): the sink takes its share of
  // every row's probability mass. A row without keys has delta = 0 (its output is 0), so it adds nothing.
  at::Tensor grad_sinks = at::empty({0}, query.options());
  if (variants.sinks.defined()) {
    const at::Tensor p_sink = at::exp(variants.sinks.view({1, s.heads, 1}) - lse);
    grad_sinks = (-(p_sink * delta).sum(at::IntArrayRef{0, 2})).to(sinks->scalar_type());
  }
  return {back(grad_q), back(grad_k), back(grad_v), grad_sinks};
}

}  // namespace

TORCH_LIBRARY_IMPL(attn, CPU, m) {
  m.impl("flash_attention", TORCH_FN(flash_attention_cpu));
  m.impl("flash_attention_backward", TORCH_FN(flash_attention_backward_cpu));
}

}  // namespace attn::ops::cpu
