// A MultiHeadAttention's self-attention with ring_attention in place of the local attention: the module's
// own projections, rotary embeddings at each row's global position, grouped K/V heads and output projection.

#include <attn/distributed/ring_attention.h>

#include <attn/modules/multi_head_attention.h>

#include "distributed/error_text.h"

#include <torch/torch.h>

namespace attn::distributed {
namespace {

constexpr const char* kContextParallel = "attn::distributed::context_parallel";

/// The length of the whole sequence: the sum of every rank's T_local (one all-reduce).
int64_t global_length(int64_t local, c10d::ProcessGroup& group, std::chrono::milliseconds timeout) {
  if (group.getSize() == 1) return local;
  std::vector<torch::Tensor> total{torch::tensor({local}, torch::kLong)};
  try {
    group.allreduce(total)->wait(timeout);
  } catch (const std::exception& error) {
    TORCH_CHECK(false, kContextParallel, ": rank ", group.getRank(),
                ": the all-reduce of the sequence length failed within ", timeout.count(),
                " ms; every rank must call collectively. Cause: ", detail::cause_of(error));
  }
  return total[0].item<int64_t>();
}

torch::Tensor project(const torch::nn::Linear& linear, const torch::Tensor& x) {
  return torch::nn::functional::linear(x, linear->weight, linear->bias);
}

/// [B, T, width] -> [B, heads, T, width / heads]
torch::Tensor split_heads(const torch::Tensor& x, int64_t heads) {
  return x.view({x.size(0), x.size(1), heads, x.size(2) / heads}).transpose(1, 2);
}

}  // namespace

torch::Tensor context_parallel(const MultiHeadAttention& mha, const torch::Tensor& x,
                               const c10::intrusive_ptr<c10d::ProcessGroup>& group,
                               std::optional<RingAttentionOptions> options) {
  TORCH_CHECK(!mha.is_empty(), kContextParallel, ": mha is an empty holder");
  TORCH_CHECK(group, kContextParallel, ": group is null");
  const MultiHeadAttentionImpl& m = *mha;
  const MultiHeadAttentionOptions& o = m.options;
  TORCH_CHECK(x.defined() && (x.dim() == 3 || x.dim() == 2) && x.size(-1) == o.embed_dim(), kContextParallel,
              ": x must be this rank's shard [B, T_local, embed_dim=", o.embed_dim(), "] or [T_local, ",
              o.embed_dim(), "]; got ", x.defined() ? c10::str(x.sizes()) : std::string("undefined"));
  TORCH_CHECK(o.kdim() == o.embed_dim() && o.vdim() == o.embed_dim(), kContextParallel,
              ": context_parallel is self-attention: the module's kdim (", o.kdim(), ") and vdim (", o.vdim(),
              ") must be its embed_dim (", o.embed_dim(), ")");
  TORCH_CHECK(o.window_left() < 0 && o.window_right() < 0 && o.softcap() == 0.0 && !o.alibi() && !o.sinks(),
              kContextParallel,
              ": the module's window, softcap, alibi and sinks options are not supported by ring_attention");
  TORCH_CHECK(o.dropout() == 0.0 || !m.is_training(), kContextParallel,
              ": attention dropout is not supported by ring_attention; call eval() or set dropout to 0");
  // Self-attention: Tq = Tk, so both causal alignments give the same mask.
  RingAttentionOptions ring = options ? *options : RingAttentionOptions();
  ring.is_causal(ring.is_causal() || o.causal());  // a causal module stays causal whatever options say
  if (!ring.scale() && o.scale()) ring.scale(o.scale());

  const bool batched = x.dim() == 3;
  const torch::Tensor input = batched ? x : x.unsqueeze(0);
  torch::Tensor q = split_heads(project(m.q_proj, input), o.num_heads());
  torch::Tensor k = split_heads(project(m.k_proj, input), m.num_kv_heads());
  torch::Tensor v = split_heads(project(m.v_proj, input), m.num_kv_heads());
  if (!m.rotary.is_empty()) {
    const int64_t seq_len = global_length(input.size(1), *group, ring.timeout());
    const torch::Tensor positions =
        shard_positions(seq_len, group->getRank(), group->getSize(), ring.layout()).to(input.device());
    // The frequencies of the whole sequence: dynamic NTK's depend on its length, not on this shard's.
    const RotaryFrequencies frequencies = m.rotary->frequencies(seq_len);
    q = m.rotary->rotate(q, positions, frequencies);
    k = m.rotary->rotate(k, positions, frequencies);
  }
  const torch::Tensor heads = ring_attention(q, k, v, group, ring);
  torch::Tensor out = heads.transpose(1, 2).reshape({input.size(0), input.size(1), -1});
  if (!m.out_proj.is_empty()) out = project(m.out_proj, out);
  return batched ? out : out.squeeze(0);
}

}  // namespace attn::distributed
