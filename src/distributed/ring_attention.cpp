// Ring attention (Liu et al. 2023; the schedule of ring-flash-attention and PyTorch's context_parallel):
// N steps, in each of which a rank attends its queries to the K/V shard it holds while that shard moves on
// to the next rank. Partial results merge by their log-sum-exp. The backward pass recomputes each block
// from the global output and log-sum-exp (FlashAttention-2's backward), rotates K/V again, and sends the
// dK/dV accumulators around a second ring, one step behind, so that they arrive at their owners last.

#include <attn/distributed/ring_attention.h>

#include <attn/ops/flash_attention.h>

#include "distributed/ring_exchange.h"
#include "distributed/ring_plan.h"

#include <torch/autograd.h>
#include <torch/torch.h>

#include <chrono>

namespace attn::distributed {
namespace detail {
namespace {

using Clock = std::chrono::steady_clock;

/// One rank's K/V shard (and key padding), flattened into one buffer: one message per hop.
struct KeysValues {
  torch::Tensor buffer;
  torch::Tensor k, v;     ///< views into buffer, [B, H_kv, T, d]
  torch::Tensor padding;  ///< [B, 1, T] in the buffer's dtype, 1 = padding; undefined without padding
};

int64_t kv_numel(const RingPlan& plan, int64_t length) {
  return plan.batch * plan.kv_heads * length * (plan.head_dim_qk + plan.head_dim_v) +
         (plan.has_padding ? plan.batch * length : 0);
}

KeysValues view_keys_values(const RingPlan& plan, torch::Tensor buffer, int64_t length) {
  KeysValues kv;
  const int64_t nk = plan.batch * plan.kv_heads * length * plan.head_dim_qk;
  const int64_t nv = plan.batch * plan.kv_heads * length * plan.head_dim_v;
  kv.k = buffer.narrow(0, 0, nk).view({plan.batch, plan.kv_heads, length, plan.head_dim_qk});
  kv.v = buffer.narrow(0, nk, nv).view({plan.batch, plan.kv_heads, length, plan.head_dim_v});
  if (plan.has_padding) kv.padding = buffer.narrow(0, nk + nv, plan.batch * length).view({plan.batch, 1, length});
  kv.buffer = std::move(buffer);
  return kv;
}

KeysValues pack_keys_values(const RingPlan& plan, const torch::Tensor& k, const torch::Tensor& v,
                            const torch::Tensor& padding) {
  std::vector<torch::Tensor> parts{k.reshape(-1), v.reshape(-1)};
  if (plan.has_padding) parts.push_back(padding.to(k.scalar_type()).reshape(-1));
  return view_keys_values(plan, torch::cat(parts), k.size(2));
}

KeysValues empty_keys_values(const RingPlan& plan, int source) {
  const int64_t length = plan.lengths[source];
  return view_keys_values(plan, torch::empty({kv_numel(plan, length)}, torch::TensorOptions().dtype(plan.dtype).device(plan.device)),
                          length);
}

/// The op's arguments for one block of the keys and values held: their padding (read after the hop that filled
/// it), the block's causality and the plan's scale.
attn::ops::FlashArguments block_arguments(const RingPlan& plan, const KeysValues& kv, const BlockCall& call) {
  attn::ops::FlashArguments a;
  if (kv.padding.defined()) a.key_padding_mask = kv.padding.narrow(2, call.k_start, call.k_length) != 0;
  a.is_causal = call.causal;
  a.causal_offset = call.causal_offset;
  if (plan.scale) a.scale = *plan.scale;
  return a;
}

torch::Tensor rows(const torch::Tensor& x, int64_t start, int64_t length) { return x.narrow(2, start, length); }

/// Merges a block's (out, lse) into the running (acc, acc_lse) rows, in place. Rows where both are -inf
/// (no allowed key yet) stay zero.
void merge(torch::Tensor acc, torch::Tensor acc_lse, const torch::Tensor& out, const torch::Tensor& lse) {
  const torch::Tensor block_lse = lse.to(acc_lse.scalar_type());
  const torch::Tensor m = torch::maximum(acc_lse, block_lse);
  const torch::Tensor finite_m = torch::where(torch::isfinite(m), m, torch::zeros_like(m));
  const torch::Tensor a = (acc_lse - finite_m).exp();
  const torch::Tensor b = (block_lse - finite_m).exp();
  const torch::Tensor total = a + b;
  const torch::Tensor safe_total = torch::where(total > 0, total, torch::ones_like(total));
  acc.mul_((a / safe_total).unsqueeze(-1)).add_(out.to(acc.scalar_type()) * (b / safe_total).unsqueeze(-1));
  acc_lse.copy_(finite_m + total.log());
}

/// The forward ring: this rank's rows of the output (the inputs' dtype) and their log-sum-exp.
std::tuple<torch::Tensor, torch::Tensor> forward_ring(c10d::ProcessGroup& group, const RingPlan& plan,
                                                      const torch::Tensor& q, const torch::Tensor& k,
                                                      const torch::Tensor& v, const torch::Tensor& padding,
                                                      RingAttentionStats& stats) {
  const auto begin = Clock::now();
  RingExchange exchange(group, plan, stats);
  const auto acc_options = plan.accumulate_options();
  const int64_t tq = q.size(2);
  torch::Tensor acc = torch::zeros({plan.batch, plan.heads, tq, plan.head_dim_v}, acc_options);
  torch::Tensor acc_lse = torch::full({plan.batch, plan.heads, tq}, -std::numeric_limits<double>::infinity(),
                                      acc_options);
  KeysValues held = pack_keys_values(plan, k, v, padding);
  for (int step = 0; step < plan.world; ++step) {
    const int source = plan.source(step);
    const bool more = step + 1 < plan.world;
    KeysValues next;
    RingExchange::Hop hop;
    if (more) {
      next = empty_keys_values(plan, plan.source(step + 1));
      hop = exchange.start(held.buffer, next.buffer, Traffic::ForwardKeysValues, step);
    }
    const auto compute = Clock::now();
    for (const BlockCall& call : block_calls(plan.segments[plan.rank], plan.segments[source], plan.is_causal)) {
      auto [out, lse] = attn::ops::flash_attention(
          rows(q, call.q_start, call.q_length), rows(held.k, call.k_start, call.k_length),
          rows(held.v, call.k_start, call.k_length), block_arguments(plan, held, call));
      merge(rows(acc, call.q_start, call.q_length), acc_lse.narrow(2, call.q_start, call.q_length), out, lse);
    }
    stats.compute_seconds += seconds_since(compute);
    if (more) {
      exchange.finish(hop);
      held = std::move(next);
    }
  }
  stats.total_seconds += seconds_since(begin);
  return {acc.to(plan.dtype), acc_lse};
}

/// The backward ring: (dq, dk, dv) of this rank's shards.
std::tuple<torch::Tensor, torch::Tensor, torch::Tensor> backward_ring(
    c10d::ProcessGroup& group, const RingPlan& plan, const torch::Tensor& q, const torch::Tensor& k,
    const torch::Tensor& v, const torch::Tensor& padding, const torch::Tensor& out, const torch::Tensor& lse,
    const torch::Tensor& grad_out, RingAttentionStats& stats) {
  const auto begin = Clock::now();
  RingExchange exchange(group, plan, stats);
  const auto acc_options = plan.accumulate_options();
  const int64_t tq = q.size(2);
  const auto gradient_numel = [&](int source) {
    return plan.batch * plan.kv_heads * plan.lengths[source] * (plan.head_dim_qk + plan.head_dim_v);
  };
  const auto gradient_views = [&](const torch::Tensor& buffer, int source) {
    const int64_t length = plan.lengths[source];
    const int64_t nk = plan.batch * plan.kv_heads * length * plan.head_dim_qk;
    return std::make_pair(
        buffer.narrow(0, 0, nk).view({plan.batch, plan.kv_heads, length, plan.head_dim_qk}),
        buffer.narrow(0, nk, buffer.numel() - nk).view({plan.batch, plan.kv_heads, length, plan.head_dim_v}));
  };

  torch::Tensor dq = torch::zeros({plan.batch, plan.heads, tq, plan.head_dim_qk}, acc_options);
  KeysValues held = pack_keys_values(plan, k, v, padding);
  torch::Tensor sending, receiving;  // the dK/dV accumulators in flight (kept alive until their hop finishes)
  RingExchange::Hop gradient_hop;
  for (int step = 0; step < plan.world; ++step) {
    const int source = plan.source(step);
    const bool more = step + 1 < plan.world;
    KeysValues next;
    RingExchange::Hop kv_hop;
    if (more) {
      next = empty_keys_values(plan, plan.source(step + 1));
      kv_hop = exchange.start(held.buffer, next.buffer, Traffic::BackwardKeysValues, step);
    }
    auto compute = Clock::now();
    torch::Tensor contribution = torch::zeros({gradient_numel(source)}, acc_options);
    auto [dk, dv] = gradient_views(contribution, source);
    for (const BlockCall& call : block_calls(plan.segments[plan.rank], plan.segments[source], plan.is_causal)) {
      auto [dq_block, dk_block, dv_block, unused] = attn::ops::flash_attention_backward(
          rows(grad_out, call.q_start, call.q_length), rows(q, call.q_start, call.q_length),
          rows(held.k, call.k_start, call.k_length), rows(held.v, call.k_start, call.k_length),
          rows(out, call.q_start, call.q_length), lse.narrow(2, call.q_start, call.q_length),
          block_arguments(plan, held, call));
      rows(dq, call.q_start, call.q_length).add_(dq_block);
      rows(dk, call.k_start, call.k_length).add_(dk_block);
      rows(dv, call.k_start, call.k_length).add_(dv_block);
    }
    stats.compute_seconds += seconds_since(compute);
    if (step > 0) {  // the accumulator of the block held, from the ranks that held it before
      exchange.finish(gradient_hop);
      contribution.add_(receiving);
    }
    if (plan.world > 1) {
      sending = contribution;
      receiving = torch::empty({gradient_numel(plan.source(step + 1))}, acc_options);
      gradient_hop = exchange.start(sending, receiving, Traffic::Gradients, step);
    }
    if (more) {
      exchange.finish(kv_hop);
      held = std::move(next);
    }
    if (plan.world == 1) receiving = contribution;
  }
  if (plan.world > 1) exchange.finish(gradient_hop);  // this rank's own accumulator, complete
  auto [dk, dv] = gradient_views(receiving, plan.rank);
  stats.total_seconds += seconds_since(begin);
  return {dq.to(plan.dtype), dk.to(plan.dtype), dv.to(plan.dtype)};
}

class RingAttentionFunction : public torch::autograd::Function<RingAttentionFunction> {
 public:
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& q,
                                                const torch::Tensor& k, const torch::Tensor& v,
                                                const c10::intrusive_ptr<RingContext>& ring) {
    auto [out, lse] = forward_ring(*ring->group, ring->plan, q, k, v, ring->padding, *ring->stats);
    ctx->save_for_backward({q, k, v, out, lse});
    ctx->saved_data["ring"] = c10::IValue::make_capsule(ring);
    ctx->mark_non_differentiable({lse});
    return {out, lse};
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    TORCH_CHECK(!torch::GradMode::is_enabled(),
                "attn::distributed::ring_attention: double backward (create_graph=True) is not supported");
    const auto capsule = ctx->saved_data["ring"].toCapsule();
    const RingContext& ring = *static_cast<RingContext*>(capsule.get());
    const auto saved = ctx->get_saved_variables();
    // Every rank must join the backward ring, even one whose output got no gradient.
    const torch::Tensor grad_out = grads[0].defined() ? grads[0] : torch::zeros_like(saved[3]);
    auto [dq, dk, dv] = backward_ring(*ring.group, ring.plan, saved[0], saved[1], saved[2], ring.padding, saved[3],
                                      saved[4], grad_out.contiguous(), *ring.stats);
    return {dq, dk, dv, torch::Tensor()};
  }
};

}  // namespace

std::tuple<torch::Tensor, torch::Tensor> ring_strategy(const c10::intrusive_ptr<RingContext>& context,
                                                       const torch::Tensor& q, const torch::Tensor& k,
                                                       const torch::Tensor& v, bool differentiable) {
  if (!differentiable) {
    return forward_ring(*context->group, context->plan, q, k, v, context->padding, *context->stats);
  }
  auto outputs = RingAttentionFunction::apply(q, k, v, context);
  return {outputs[0], outputs[1]};
}

}  // namespace detail

const char* to_string(ContextParallelStrategy strategy) {
  switch (strategy) {
    case ContextParallelStrategy::Ring: return "ring";
    case ContextParallelStrategy::Ulysses: return "ulysses";
  }
  return "unknown";
}

std::tuple<torch::Tensor, torch::Tensor> ring_attention_with_lse(const torch::Tensor& q, const torch::Tensor& k,
                                                                 const torch::Tensor& v,
                                                                 const c10::intrusive_ptr<c10d::ProcessGroup>& group,
                                                                 const RingAttentionOptions& options) {
  TORCH_CHECK(group, "attn::distributed::ring_attention: group is null");
  const bool differentiable =
      torch::GradMode::is_enabled() && ((q.defined() && q.requires_grad()) || (k.defined() && k.requires_grad()) ||
                                        (v.defined() && v.requires_grad()));
  auto context = c10::make_intrusive<detail::RingContext>();
  context->group = group;
  context->plan = detail::agree_on_plan(q, k, v, options, *group, differentiable);
  context->padding = options.key_padding_mask();
  context->stats = options.stats() ? options.stats() : std::make_shared<RingAttentionStats>();
  if (context->plan.strategy == ContextParallelStrategy::Ulysses) {
    return detail::ulysses_strategy(context, q.contiguous(), k.contiguous(), v.contiguous());
  }
  return detail::ring_strategy(context, q.contiguous(), k.contiguous(), v.contiguous(), differentiable);
}

torch::Tensor ring_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                             const c10::intrusive_ptr<c10d::ProcessGroup>& group,
                             const RingAttentionOptions& options) {
  return std::get<0>(ring_attention_with_lse(q, k, v, group, options));
}

}  // namespace attn::distributed
