// The CPU implementation of the attn::flash_attention ops: validates what Python or C++ passed (the op is a
// public entry point of its own), lays the tensors out for the kernels and calls the variant for this CPU.

#include "common/checks.h"
#include "ops/cpu/flash_attention_kernel.h"

#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <vector>

namespace attn::ops::cpu {
namespace {

constexpr const char* kForward = "attn::flash_attention";
constexpr const char* kBackward = "attn::flash_attention_backward";

struct Sizes {
  int64_t batch, heads, tq, tk, dk, dv;
};

void check_input(const char* fn, const char* arg, const at::Tensor& t, const char* layout) {
  TORCH_CHECK(t.defined(), fn, ": ", arg, " is undefined");
  TORCH_CHECK(t.dim() == 4, fn, ": ", arg, " must be 4-D ", layout, ", got shape ", t.sizes());
  TORCH_CHECK(t.device().is_cpu(), fn, ": ", arg, " is on ", t.device(),
              "; this op runs on the CPU (attn::scaled_dot_product_attention picks a CUDA backend itself)");
  TORCH_CHECK(common::is_fused_kernel_dtype(t.scalar_type()), fn, ": ", arg,
              " must be float32, float64 or bfloat16, got ", common::dtype_name(t));
}

Sizes check_qkv(const char* fn, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  check_input(fn, "query", q, "[B, H, Tq, d_k]");
  check_input(fn, "key", k, "[B, H, Tk, d_k]");
  check_input(fn, "value", v, "[B, H, Tk, d_v]");
  common::check_same_device_dtype(fn, "key", k, "query", q);
  common::check_same_device_dtype(fn, "value", v, "query", q);
  const Sizes s{q.size(0), q.size(1), q.size(2), k.size(2), q.size(3), v.size(3)};
  TORCH_CHECK(s.dk > 0, fn, ": d_k (query's last dimension) must be positive, got query ", q.sizes());
  constexpr int64_t kMaxWidth = std::numeric_limits<int32_t>::max();  // BLAS's 32-bit sizes
  TORCH_CHECK(s.dk <= kMaxWidth && v.size(3) <= kMaxWidth, fn, ": d_k and d_v must be at most ", kMaxWidth,
              " for the fused kernel's BLAS tiles, got query ", q.sizes(), " and value ", v.sizes(),
              "; use attn::Backend::Math");
  TORCH_CHECK(k.size(0) == s.batch && k.size(1) == s.heads && k.size(3) == s.dk, fn,
              ": key must be [B, H, Tk, d_k] = [", s.batch, ", ", s.heads, ", Tk, ", s.dk, "] to match query ",
              q.sizes(), ", got key ", k.sizes());
  TORCH_CHECK(v.size(0) == s.batch && v.size(1) == s.heads && v.size(2) == s.tk, fn,
              ": value must be [B, H, Tk, d_v] = [", s.batch, ", ", s.heads, ", ", s.tk, ", d_v] to match key ",
              k.sizes(), ", got value ", v.sizes());
  return s;
}

void check_masks(const char* fn, const Sizes& s, const at::Tensor& q, const c10::optional<at::Tensor>& padding,
                 const c10::optional<at::Tensor>& attend, const c10::optional<at::Tensor>& additive) {
  using common::MaskKind;
  const auto check = [&](const char* arg, const at::Tensor& mask, MaskKind kind, at::IntArrayRef target,
                         const char* layout) { common::check_mask(fn, arg, mask, kind, q, target, layout); };
  if (padding && padding->defined()) check("key_padding_mask", *padding, MaskKind::Bool, {s.batch, s.heads, s.tk}, "[B, H, Tk]");
  if (attend && attend->defined()) {
    check("attend_mask", *attend, MaskKind::Bool, {s.batch, s.heads, s.tq, s.tk}, "[B, H, Tq, Tk]");
  }
  if (additive && additive->defined()) {
    check("additive_mask", *additive, MaskKind::AdditiveAnyFloat, {s.batch, s.heads, s.tq, s.tk}, "[B, H, Tq, Tk]");
  }
}

double resolve_scale(const char* fn, c10::optional<double> scale, int64_t dk) {
  if (!scale) return 1.0 / std::sqrt(static_cast<double>(dk));
  TORCH_CHECK(std::isfinite(*scale), fn, ": scale must be finite, got ", *scale);
  return *scale;
}

/// The kernels need unit stride along d and rows that do not overlap (BLAS reads them as a matrix). Other
/// layouts, e.g. a stride-0 expanded sequence, are copied; ordinary views pass through untouched.
at::Tensor kernel_layout(const at::Tensor& t, at::ScalarType compute) {
  at::Tensor out = t.scalar_type() == compute ? t : t.to(compute);
  const bool unit_d = out.size(-1) <= 1 || out.stride(-1) == 1;
  const bool rows_apart = out.size(-2) <= 1 || out.stride(-2) >= out.size(-1);
  // BLAS takes 32-bit leading dimensions. A larger row stride (possible on a size-1 dimension, which
  // contiguous() leaves as it is) gets a fresh, compact copy.
  const bool fits_blas = out.stride(-2) <= std::numeric_limits<int32_t>::max();
  if (!fits_blas) return out.clone(at::MemoryFormat::Contiguous);
  return unit_d && rows_apart ? out : out.contiguous();
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

  KernelMasks(const Sizes& s, const c10::optional<at::Tensor>& pad, const c10::optional<at::Tensor>& att,
              const c10::optional<at::Tensor>& add, at::ScalarType compute) {
    if (pad && pad->defined()) padding = pad->expand({s.batch, s.heads, s.tk}).unsqueeze(2);
    if (att && att->defined()) attend = att->expand({s.batch, s.heads, s.tq, s.tk});
    // Convert before broadcasting: converting a broadcast view would materialise it.
    if (add && add->defined()) additive = add->to(compute).expand({s.batch, s.heads, s.tq, s.tk});
  }

  template <typename T>
  void fill(FlashProblem<T>& p) const {
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

template <typename T>
FlashProblem<T> make_problem(const Sizes& s, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                             const KernelMasks& masks, bool is_causal, int64_t causal_offset, double scale) {
  FlashProblem<T> p;
  p.batch = s.batch, p.heads = s.heads, p.tq = s.tq, p.tk = s.tk, p.dk = s.dk, p.dv = s.dv;
  p.q = input_view<T>(q), p.k = input_view<T>(k), p.v = input_view<T>(v);
  masks.fill(p);
  p.causal = is_causal;
  p.causal_offset = causal_offset;
  p.scale = static_cast<T>(scale);
  return p;
}

at::ScalarType compute_type(const at::Tensor& t) {
  return t.scalar_type() == at::kBFloat16 ? at::kFloat : t.scalar_type();
}

std::tuple<at::Tensor, at::Tensor> flash_attention_cpu(const at::Tensor& query, const at::Tensor& key,
                                                       const at::Tensor& value,
                                                       const c10::optional<at::Tensor>& key_padding_mask,
                                                       const c10::optional<at::Tensor>& attend_mask,
                                                       const c10::optional<at::Tensor>& additive_mask, bool is_causal,
                                                       int64_t causal_offset, c10::optional<double> scale) {
  const Sizes s = check_qkv(kForward, query, key, value);
  check_masks(kForward, s, query, key_padding_mask, attend_mask, additive_mask);
  const double sc = resolve_scale(kForward, scale, s.dk);
  const at::ScalarType compute = compute_type(query);
  const at::Tensor q = kernel_layout(query, compute), k = kernel_layout(key, compute),
                   v = kernel_layout(value, compute);
  const KernelMasks masks(s, key_padding_mask, attend_mask, additive_mask, compute);

  // Laid out as [B, Tq, H, d_v] so that merging the heads back ([B, Tq, H*d_v]) is a free view.
  at::Tensor out = at::empty({s.batch, s.tq, s.heads, s.dv}, q.options()).transpose(1, 2);
  at::Tensor lse = at::empty({s.batch, s.heads, s.tq}, q.options());
  AT_DISPATCH_FLOATING_TYPES(compute, "attn::flash_attention", [&] {
    FlashForward<scalar_t> args;
    args.problem = make_problem<scalar_t>(s, q, k, v, masks, is_causal, causal_offset, sc);
    args.out = output_view<scalar_t>(out);
    args.lse = lse.data_ptr<scalar_t>();
    flash_forward(args);
  });
  if (query.scalar_type() != compute) out = out.to(query.scalar_type());
  return {out, lse};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> flash_attention_backward_cpu(
    const at::Tensor& grad_output, const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
    const at::Tensor& output, const at::Tensor& logsumexp, const c10::optional<at::Tensor>& key_padding_mask,
    const c10::optional<at::Tensor>& attend_mask, const c10::optional<at::Tensor>& additive_mask, bool is_causal,
    int64_t causal_offset, c10::optional<double> scale) {
  const Sizes s = check_qkv(kBackward, query, key, value);
  check_masks(kBackward, s, query, key_padding_mask, attend_mask, additive_mask);
  const std::vector<int64_t> out_shape{s.batch, s.heads, s.tq, s.dv};
  TORCH_CHECK(grad_output.defined() && grad_output.sizes() == at::IntArrayRef(out_shape), kBackward,
              ": grad_output must be [B, H, Tq, d_v] = ", at::IntArrayRef(out_shape), ", got ",
              grad_output.defined() ? grad_output.sizes() : at::IntArrayRef{});
  TORCH_CHECK(output.defined() && output.sizes() == at::IntArrayRef(out_shape), kBackward,
              ": output must be [B, H, Tq, d_v] = ", at::IntArrayRef(out_shape), ", got ",
              output.defined() ? output.sizes() : at::IntArrayRef{});
  const at::ScalarType compute = compute_type(query);
  TORCH_CHECK(logsumexp.defined() && logsumexp.sizes() == at::IntArrayRef({s.batch, s.heads, s.tq}) &&
                  logsumexp.scalar_type() == compute,
              kBackward, ": logsumexp must be the forward pass's [B, H, Tq] = [", s.batch, ", ", s.heads, ", ", s.tq,
              "] ", c10::toString(compute), " tensor, got ",
              logsumexp.defined() ? logsumexp.sizes() : at::IntArrayRef{});
  const double sc = resolve_scale(kBackward, scale, s.dk);
  const at::Tensor q = kernel_layout(query, compute), k = kernel_layout(key, compute),
                   v = kernel_layout(value, compute), dout = kernel_layout(grad_output, compute);
  const at::Tensor lse = logsumexp.contiguous();
  // delta_i = Σ_c dO[i,c]·O[i,c] = Σ_j P[i,j]·dP[i,j]: the softmax backward's row term, O(T) to precompute.
  const at::Tensor delta = (dout * output.to(compute)).sum(-1).contiguous();
  const KernelMasks masks(s, key_padding_mask, attend_mask, additive_mask, compute);

  // Key blocks are split among enough tasks to keep the threads busy; each split owns a dQ slice, summed
  // in a fixed order. The split count does not depend on the thread count, so gradients are bitwise the
  // same whatever at::set_num_threads says.
  const int64_t k_blocks = (s.tk + kBackwardKeyBlock - 1) / kBackwardKeyBlock;
  const int64_t heads_total = std::max<int64_t>(s.batch * s.heads, 1);
  constexpr int64_t kMinTasks = 16;
  const int64_t wanted = (kMinTasks + heads_total - 1) / heads_total;
  const int64_t splits = std::clamp<int64_t>(wanted, 1, std::max<int64_t>(k_blocks, 1));

  at::Tensor grad_q = at::zeros({splits * s.batch, s.heads, s.tq, s.dk}, q.options());
  at::Tensor grad_k = at::empty({s.batch, s.heads, s.tk, s.dk}, q.options());
  at::Tensor grad_v = at::empty({s.batch, s.heads, s.tk, s.dv}, q.options());
  AT_DISPATCH_FLOATING_TYPES(compute, "attn::flash_attention_backward", [&] {
    FlashBackward<scalar_t> args;
    args.problem = make_problem<scalar_t>(s, q, k, v, masks, is_causal, causal_offset, sc);
    args.grad_out = input_view<scalar_t>(dout);
    args.lse = lse.data_ptr<scalar_t>();
    args.delta = delta.data_ptr<scalar_t>();
    args.grad_q = output_view<scalar_t>(grad_q);
    args.splits = splits;
    args.grad_k = output_view<scalar_t>(grad_k);
    args.grad_v = output_view<scalar_t>(grad_v);
    flash_backward(args);
  });
  if (splits > 1) grad_q = grad_q.view({splits, s.batch, s.heads, s.tq, s.dk}).sum(0);
  const auto back = [&](const at::Tensor& g) {
    return query.scalar_type() == compute ? g : g.to(query.scalar_type());
  };
  return {back(grad_q), back(grad_k), back(grad_v)};
}

}  // namespace

TORCH_LIBRARY_IMPL(attn, CPU, m) {
  m.impl("flash_attention", TORCH_FN(flash_attention_cpu));
  m.impl("flash_attention_backward", TORCH_FN(flash_attention_backward_cpu));
}

}  // namespace attn::ops::cpu
