// DeepSpeed-Ulysses (Jacobs et al. 2023): an all-to-all turns each rank's sequence shard of every head into the
// whole sequence of H/N heads; attention then runs locally on the fused kernel (autograd through the op), and
// a second all-to-all turns the output back into sequence shards. The all-to-alls are autograd functions whose
// backward is the opposite all-to-all, so the backward pass is collective in the same order on every rank.

#include <attn/ops/flash_attention.h>

#include "distributed/error_text.h"
#include "distributed/ring_plan.h"

#include <torch/autograd.h>
#include <torch/torch.h>

#include <chrono>

namespace attn::distributed::detail {
namespace {

using Clock = std::chrono::steady_clock;

/// Gloo's all-to-all copies elements of the types it knows (not bfloat16 on LibTorch 1.13): bfloat16 travels as
/// float16 of the same bits, copied, never converted.
torch::Tensor as_transport(const torch::Tensor& x) {
  return x.scalar_type() == torch::kBFloat16 ? x.view(torch::kHalf) : x;
}

/// One all-to-all of flat buffers: `input` split into per-destination parts of `send_counts` elements, into
/// `output` of per-source parts of `receive_counts` elements.
void all_to_all(RingContext& context, torch::Tensor output, torch::Tensor input, std::vector<int64_t> receive_counts,
                std::vector<int64_t> send_counts, const char* what) {
  const RingPlan& plan = context.plan;
  torch::Tensor out = as_transport(output), in = as_transport(input);
  // Counted before the call: Gloo's alltoall_base moves the count vectors into its work.
  RingAttentionStats& stats = *context.stats;
  const int64_t element = input.element_size();
  for (int r = 0; r < plan.world; ++r) {
    if (r == plan.rank) continue;
    stats.bytes_sent += send_counts[r] * element;
    stats.bytes_received += receive_counts[r] * element;
  }
  const auto start = Clock::now();
  try {
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"  // LibTorch 2.x renames it all_to_all_single
    context.group->alltoall_base(out, in, receive_counts, send_counts)->wait(plan.timeout);
#pragma GCC diagnostic pop
  } catch (const std::exception& error) {
    TORCH_CHECK(false, "attn::distributed::ring_attention (Ulysses): rank ", plan.rank, " of ", plan.world, ": the ",
                what, " all-to-all failed within the timeout of ", plan.timeout.count(),
                " ms: a peer died, stopped calling, or is calling something else. Cause: ", cause_of(error));
  }
  stats.wait_seconds += std::chrono::duration<double>(Clock::now() - start).count();
  stats.hops += 1;
}

/// x [B, X, T_local, d] (this rank's shard of X heads) -> [B, X/N, T, d], the whole sequence in order, for this
/// rank's block of X/N heads.
torch::Tensor sequence_to_heads(RingContext& context, const torch::Tensor& x, const char* what) {
  const RingPlan& plan = context.plan;
  const int64_t n = plan.world, b = x.size(0), g = x.size(1) / n, c = x.size(2), d = x.size(3);
  const torch::Tensor input = x.reshape({b, n, g, c, d}).permute({1, 2, 0, 3, 4}).contiguous().view(-1);
  std::vector<int64_t> send(n, g * b * c * d), receive;
  for (int64_t r = 0; r < n; ++r) receive.push_back(g * b * plan.lengths[r] * d);
  torch::Tensor output = torch::empty({g * b * plan.seq_len * d}, x.options());
  all_to_all(context, output, input, receive, send, what);
  std::vector<torch::Tensor> shards;
  int64_t offset = 0;
  for (int64_t r = 0; r < n; ++r) {
    shards.push_back(output.narrow(0, offset, receive[r]).view({g, b, plan.lengths[r], d}));
    offset += receive[r];
  }
  return unshard_sequence(shards, 2, plan.layout).permute({1, 0, 2, 3}).contiguous();
}

/// The inverse: y [B, X/N, T, d] -> this rank's shard of all X heads, [B, X, T_local, d].
torch::Tensor heads_to_sequence(RingContext& context, const torch::Tensor& y, const char* what) {
  const RingPlan& plan = context.plan;
  const int64_t n = plan.world, b = y.size(0), g = y.size(1), d = y.size(3), c = plan.lengths[plan.rank];
  const torch::Tensor t = y.permute({1, 0, 2, 3});
  std::vector<torch::Tensor> pieces;
  std::vector<int64_t> send, receive(n, g * b * c * d);
  for (int64_t r = 0; r < n; ++r) {
    pieces.push_back(shard_sequence(t, 2, r, n, plan.layout).view(-1));
    send.push_back(pieces.back().numel());
  }
  torch::Tensor output = torch::empty({n * g * b * c * d}, y.options());
  all_to_all(context, output, torch::cat(pieces), receive, send, what);
  return output.view({n, g, b, c, d}).permute({2, 0, 1, 3, 4}).reshape({b, n * g, c, d});
}

torch::Tensor full_padding(RingContext& context) {
  const RingPlan& plan = context.plan;
  const int64_t n = plan.world, b = plan.batch;
  const torch::Tensor own = context.padding.to(torch::kLong).reshape({1, b, plan.lengths[plan.rank]});
  std::vector<int64_t> send(n, own.numel()), receive;
  for (int64_t r = 0; r < n; ++r) receive.push_back(b * plan.lengths[r]);
  torch::Tensor output = torch::empty({b * plan.seq_len}, torch::kLong);
  all_to_all(context, output, own.expand({n, b, plan.lengths[plan.rank]}).contiguous().view(-1), receive, send,
             "key padding");
  std::vector<torch::Tensor> shards;
  int64_t offset = 0;
  for (int64_t r = 0; r < n; ++r) {
    shards.push_back(output.narrow(0, offset, receive[r]).view({b, plan.lengths[r]}));
    offset += receive[r];
  }
  return unshard_sequence(shards, 1, plan.layout) != 0;
}

RingContext& context_of(torch::autograd::AutogradContext* ctx) {
  return *static_cast<RingContext*>(ctx->saved_data["context"].toCapsule().get());
}

void remember_output(torch::autograd::AutogradContext* ctx, const c10::intrusive_ptr<RingContext>& context,
          const torch::Tensor& output) {
  ctx->saved_data["context"] = c10::IValue::make_capsule(context);
  ctx->saved_data["sizes"] = output.sizes().vec();
  ctx->saved_data["dtype"] = output.scalar_type();
}

/// The incoming gradient, or zeros where the output got none: every rank must join the backward all-to-all.
torch::Tensor gradient_or_zeros(torch::autograd::AutogradContext* ctx, const torch::Tensor& grad) {
  if (grad.defined()) return grad.contiguous();
  return torch::zeros(ctx->saved_data["sizes"].toIntVector(), ctx->saved_data["dtype"].toScalarType());
}

class SequenceToHeads : public torch::autograd::Function<SequenceToHeads> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x,
                               const c10::intrusive_ptr<RingContext>& context) {
    torch::Tensor heads = sequence_to_heads(*context, x, "sequence-to-heads");
    remember_output(ctx, context, heads);
    return heads;
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    return {heads_to_sequence(context_of(ctx), gradient_or_zeros(ctx, grads[0]), "backward heads-to-sequence"),
            torch::Tensor()};
  }
};

class HeadsToSequence : public torch::autograd::Function<HeadsToSequence> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& y,
                               const c10::intrusive_ptr<RingContext>& context) {
    torch::Tensor sequence = heads_to_sequence(*context, y, "heads-to-sequence");
    remember_output(ctx, context, sequence);
    return sequence;
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    return {sequence_to_heads(context_of(ctx), gradient_or_zeros(ctx, grads[0]), "backward sequence-to-heads"),
            torch::Tensor()};
  }
};

}  // namespace

std::tuple<torch::Tensor, torch::Tensor> ulysses_strategy(const c10::intrusive_ptr<RingContext>& context,
                                                          const torch::Tensor& q, const torch::Tensor& k,
                                                          const torch::Tensor& v) {
  const RingPlan& plan = context->plan;
  const auto begin = Clock::now();
  const torch::Tensor padding = plan.has_padding ? full_padding(*context) : torch::Tensor();
  const torch::Tensor qh = SequenceToHeads::apply(q, context);
  const torch::Tensor kh = SequenceToHeads::apply(k, context);
  const torch::Tensor vh = SequenceToHeads::apply(v, context);
  const auto compute = Clock::now();
  attn::ops::FlashArguments arguments;
  if (padding.defined()) arguments.key_padding_mask = padding.unsqueeze(1);
  arguments.is_causal = plan.is_causal;
  if (plan.scale) arguments.scale = *plan.scale;
  auto [out, lse] = attn::ops::flash_attention(qh, kh, vh, arguments);
  context->stats->compute_seconds += std::chrono::duration<double>(Clock::now() - compute).count();
  const torch::Tensor out_shard = HeadsToSequence::apply(out, context);
  torch::Tensor lse_shard;
  {
    torch::NoGradGuard no_grad;
    lse_shard = heads_to_sequence(*context, lse.unsqueeze(-1).contiguous(), "log-sum-exp").squeeze(-1);
  }
  context->stats->total_seconds += std::chrono::duration<double>(Clock::now() - begin).count();
  return {out_shard, lse_shard};
}

}  // namespace attn::distributed::detail
