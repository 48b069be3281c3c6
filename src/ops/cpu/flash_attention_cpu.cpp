// The CPU implementation of the attn::flash_attention ops: checks the arguments (ops/attention_contract.h),
// lays the tensors out for the kernels and calls the variant for this CPU.

#include "common/band.h"
#include "ops/cpu/kernels.h"
#include "ops/cpu/math/kernel_layout.h"
#include "ops/cpu/products/route.h"
#include "ops/attention_contract.h"
#include "ops/flash_attention_schema.h"

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

/// `t` in the compute type, in a layout the kernels can read (ops/cpu/math/kernel_layout.h).
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

  KernelMasks(const FlashSizes& s, const FlashArguments& a, at::ScalarType compute) {
    const auto given = [](const c10::optional<at::Tensor>& t) { return t && t->defined(); };
    if (given(a.key_padding_mask)) padding = a.key_padding_mask->expand({s.batch, s.heads, s.tk}).unsqueeze(2);
    if (given(a.attend_mask)) attend = a.attend_mask->expand({s.batch, s.heads, s.tq, s.tk});
    // Convert before broadcasting: converting a broadcast view would materialise it.
    if (given(a.additive_mask)) additive = a.additive_mask->to(compute).expand({s.batch, s.heads, s.tq, s.tk});
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

  KernelVariants(const FlashSizes& s, const FlashArguments& a, at::ScalarType compute)
      : window_left(common::applied_window(a.window_left)),
        window_right(common::applied_window(a.window_right)),
        softcap(a.softcap),
        sequences(s.sequences) {
    if (a.has_alibi()) alibi = a.alibi_slopes->to(compute).contiguous();
    if (a.has_sinks()) sinks = a.sinks->to(compute).contiguous();
    if (sequences > 0) cu_seqlens_q = a.cu_seqlens_q->contiguous(), cu_seqlens_k = a.cu_seqlens_k->contiguous();
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

/// What the kernels need of one call, in their forms: its masks, variants, scale and product route.
struct KernelCall {
  KernelCall(const FlashSizes& sizes, const FlashArguments& a, at::ScalarType compute_type, ProductRoute r)
      : s(sizes),
        masks(sizes, a, compute_type),
        variants(sizes, a, compute_type),
        is_causal(a.is_causal),
        causal_offset(a.causal_offset.expect_int()),
        scale(resolved_scale(a.scale, sizes.dk)),
        compute(compute_type),
        route(r) {}

  FlashSizes s;
  KernelMasks masks;
  KernelVariants variants;
  bool is_causal;
  int64_t causal_offset;
  double scale;
  at::ScalarType compute;
  ProductRoute route;
};

/// Zeros of `t`'s dtype and sizes but a last dimension of 2: values (and their output and its gradient) of width
/// zero run as two columns of zeros, since an empty tensor may have no storage for the kernels' row pointers to
/// point into; two, so that the bfloat16 routes, which read d_v in pairs, still take the call. The log-sum-exp
/// does not depend on the values, and zero dO and O give zero dQ and dK.
at::Tensor two_columns_of_zeros(const at::Tensor& t) {
  std::vector<int64_t> sizes = t.sizes().vec();
  sizes.back() = 2;
  return at::zeros(sizes, t.options());
}

template <typename T, typename In = T>
FlashProblem<T, In> make_problem(const KernelCall& call, const at::Tensor& q, const at::Tensor& k,
                                 const at::Tensor& v) {
  const FlashSizes& s = call.s;
  // The products need d_k and d_v positive (products/operands.h); the entries below run d_v = 0 as zeros.
  TORCH_INTERNAL_ASSERT(s.dk > 0 && s.dv > 0, "flash kernel reached with d_k = ", s.dk, ", d_v = ", s.dv);
  FlashProblem<T, In> p;
  p.route = call.route;
  p.batch = s.batch, p.heads = s.heads, p.tq = s.tq, p.tk = s.tk, p.dk = s.dk, p.dv = s.dv;
  p.kv_heads = s.kv_heads;
  p.q = input_view<In>(q), p.k = input_view<In>(k), p.v = input_view<In>(v);
  call.masks.fill(p);
  call.variants.fill(p);
  p.causal = call.is_causal;
  p.causal_offset = call.causal_offset;
  p.scale = static_cast<T>(call.scale);
  return p;
}


std::tuple<at::Tensor, at::Tensor> flash_attention_cpu(const at::Tensor& query, const at::Tensor& key,
                                                       const at::Tensor& value, const FlashArguments& arguments) {
  const FlashSizes s = check_forward_args(kForwardOp, query, key, value, arguments);
  if (s.dv == 0) {
    const auto [out, lse] = flash_attention_cpu(query, key, two_columns_of_zeros(value), arguments);
    return {out.narrow(-1, 0, 0), lse};
  }
  // The pairs of Q·Kᵀ run along d_k.
  const ProductRoute route = flash_product_route(query.scalar_type(), s.dk % 2 == 0);
  const KernelCall call(s, arguments, compute_type(query), route);
  if (query.scalar_type() == at::kBFloat16 && reads_bfloat16(route)) {
    const at::Tensor q = row_major_layout(query), k = row_major_layout(key), v = row_major_layout(value);
    at::Tensor out, lse;
    std::tie(out, lse) = empty_forward_results(s, q.options(), call.compute);
    FlashForward<float, c10::BFloat16> args;
    args.problem = make_problem<float, c10::BFloat16>(call, q, k, v);
    args.out = output_view<c10::BFloat16>(out);
    args.lse = lse.data_ptr<float>();
    flash_forward(args);
    return {out, lse};
  }
  const at::Tensor q = kernel_layout(query, call.compute), k = kernel_layout(key, call.compute),
                   v = kernel_layout(value, call.compute);

  at::Tensor out, lse;  // not a structured binding: C++17 lambdas (the dispatch below) cannot capture those
  std::tie(out, lse) = empty_forward_results(s, q.options(), call.compute);
  AT_DISPATCH_FLOATING_TYPES(call.compute, "attn::flash_attention", [&] {
    FlashForward<scalar_t> args;
    args.problem = make_problem<scalar_t>(call, q, k, v);
    args.out = output_view<scalar_t>(out);
    args.lse = lse.data_ptr<scalar_t>();
    flash_forward(args);
  });
  if (query.scalar_type() != call.compute) out = out.to(query.scalar_type());
  return {out, lse};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> flash_attention_backward_cpu(
    const at::Tensor& grad_output, const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
    const at::Tensor& output, const at::Tensor& logsumexp, const FlashArguments& arguments) {
  const FlashSizes s = check_backward_args(grad_output, query, key, value, output, logsumexp, arguments);
  if (s.dv == 0) {
    const auto [grad_q, grad_k, grad_v, grad_sinks] =
        flash_attention_backward_cpu(two_columns_of_zeros(grad_output), query, key, two_columns_of_zeros(value),
                                     two_columns_of_zeros(output), logsumexp, arguments);
    return {grad_q, grad_k, grad_v.narrow(-1, 0, 0), grad_sinks};
  }
  // The kernels read bfloat16 inputs as they are only if dO and O are bfloat16 too (else all of them widen); the
  // pairs run along d_v in dO·Vᵀ, so it must be even as well.
  const bool bfloat16_inputs = query.scalar_type() == at::kBFloat16 && grad_output.scalar_type() == at::kBFloat16 &&
                               output.scalar_type() == at::kBFloat16;
  const ProductRoute route =
      flash_product_route(query.scalar_type(), bfloat16_inputs && s.dk % 2 == 0 && s.dv % 2 == 0);
  const KernelCall call(s, arguments, compute_type(query), route);
  const at::ScalarType compute = call.compute;
  const bool as_bfloat16 = bfloat16_inputs && reads_bfloat16(route);
  const auto layout = [&](const at::Tensor& t) { return as_bfloat16 ? row_major_layout(t) : kernel_layout(t, compute); };
  const at::Tensor q = layout(query), k = layout(key), v = layout(value), dout = layout(grad_output),
                   out = layout(output);
  const at::Tensor lse = logsumexp.contiguous();
  // delta_i = Σ_c dO[i,c]·O[i,c] = Σ_j P[i,j]·dP[i,j]: the softmax backward's row term, which the kernel writes.
  const at::Tensor delta = at::empty({s.batch, s.heads, s.tq}, q.options().dtype(compute));
  const int64_t packed = s.sequences;
  const KernelVariants& variants = call.variants;

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

  // The gradients accumulate in the compute type on every route, dQ in a slice per split; the kernel writes them
  // in the inputs' type (bfloat16 where the kernels read it, else the compute type), dQ as the slices' sum.
  const at::ScalarType written = as_bfloat16 ? at::kBFloat16 : compute;
  at::Tensor grad_q_splits = at::zeros({splits * s.batch, s.heads, s.tq, s.dk}, q.options().dtype(compute));
  at::Tensor grad_q = splits == 1 && written == compute
                          ? grad_q_splits
                          : at::empty({s.batch, s.heads, s.tq, s.dk}, q.options().dtype(written));
  at::Tensor grad_k = at::empty({s.batch, s.kv_heads, s.tk, s.dk}, q.options().dtype(written));
  at::Tensor grad_v = at::empty({s.batch, s.kv_heads, s.tk, s.dv}, q.options().dtype(written));
  const auto run = [&](auto args) {
    using T = std::remove_const_t<std::remove_pointer_t<decltype(args.lse)>>;
    using In = std::remove_const_t<std::remove_pointer_t<decltype(args.grad_out.data)>>;
    args.problem = make_problem<T, In>(call, q, k, v);
    args.grad_out = input_view<In>(dout);
    args.out = input_view<In>(out);
    args.lse = lse.data_ptr<T>();
    args.delta = delta.data_ptr<T>();
    args.grad_q_splits = output_view<T>(grad_q_splits);
    args.splits = splits;
    args.grad_q = output_view<In>(grad_q);
    args.grad_k = output_view<In>(grad_k);
    args.grad_v = output_view<In>(grad_v);
    flash_backward(args);
  };
  if (as_bfloat16) {
    run(FlashBackward<float, c10::BFloat16>{});
  } else {
    AT_DISPATCH_FLOATING_TYPES(compute, "attn::flash_attention_backward", [&] { run(FlashBackward<scalar_t>{}); });
  }
  // float16 inputs run in float: their gradients are converted back.
  const auto back = [&](const at::Tensor& g) {
    return g.scalar_type() == query.scalar_type() ? g : g.to(query.scalar_type());
  };
  // d sink_h = -Σ_{b,i} p_sink(b,h,i) · delta(b,h,i), p_sink = exp(sink_h - lse): the sink takes its share of
  // every row's probability mass. A row without keys has delta = 0 (its output is 0), so it adds nothing.
  at::Tensor grad_sinks = at::empty({0}, query.options());
  if (variants.sinks.defined()) {
    const at::Tensor p_sink = at::exp(variants.sinks.view({1, s.heads, 1}) - lse);
    grad_sinks = (-(p_sink * delta).sum(at::IntArrayRef{0, 2})).to(arguments.sinks->scalar_type());
  }
  return {back(grad_q), back(grad_k), back(grad_v), grad_sinks};
}

}  // namespace

TORCH_LIBRARY_IMPL(attn, CPU, m) {
  m.impl("flash_attention", TORCH_FN(ForwardKernel<flash_attention_cpu>::call));
  m.impl("flash_attention_backward", TORCH_FN(BackwardKernel<flash_attention_backward_cpu>::call));
}

}  // namespace attn::ops::cpu
