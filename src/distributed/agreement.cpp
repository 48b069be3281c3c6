// Before any K/V moves, the ranks of a ring_attention call compare what each holds: one all-gather of a
// fixed-size descriptor. Every rank then runs the same checks on the same descriptors, so a mismatch (or a
// rank whose own inputs are wrong) ends the call on every rank with the same message, instead of a silently
// wrong output on one rank or an exception on Gloo's own thread (std::terminate).

#include "distributed/error_text.h"
#include "distributed/ring_plan.h"

#include <torch/torch.h>

#include <cstring>
#include <sstream>
#include <string>

namespace attn::distributed::detail {
namespace {

constexpr const char* kRingAttention = "attn::distributed::ring_attention";
constexpr int64_t kMagic = 0x52494e4701;  // "RING", version 1

/// The descriptor's fields, in order. Shapes are stored as (dim, up to four sizes).
enum Field : int64_t {
  kMagicField, kRank, kWorld,
  kQDim, kQ0, kQ1, kQ2, kQ3,
  kKDim, kK0, kK1, kK2, kK3,
  kVDim, kV0, kV1, kV2, kV3,
  kMaskDim, kMask0, kMask1,
  kQType, kKType, kVType, kMaskType,
  kQDevice, kKDevice, kVDevice, kMaskDevice,
  kCausal, kLayout, kHasScale, kScaleBits, kDifferentiable, kStrategy, kTimeoutMs, kGradFlags,
  kFieldCount
};

void put_shape(std::vector<int64_t>& d, Field dim_field, const torch::Tensor& t) {
  d[dim_field] = t.defined() ? t.dim() : -1;
  for (int64_t i = 0; i < 4; ++i) d[dim_field + 1 + i] = -1;
  if (!t.defined()) return;
  const int64_t max_sizes = dim_field == kMaskDim ? 2 : 4;
  for (int64_t i = 0; i < std::min<int64_t>(t.dim(), max_sizes); ++i) d[dim_field + 1 + i] = t.size(i);
}

std::vector<int64_t> describe(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                              const RingAttentionOptions& options, const c10d::ProcessGroup& group,
                              bool differentiable) {
  std::vector<int64_t> d(kFieldCount, -1);
  d[kMagicField] = kMagic;
  d[kRank] = group.getRank();
  d[kWorld] = group.getSize();
  const torch::Tensor& mask = options.key_padding_mask();
  put_shape(d, kQDim, q);
  put_shape(d, kKDim, k);
  put_shape(d, kVDim, v);
  put_shape(d, kMaskDim, mask);
  const auto type = [](const torch::Tensor& t) -> int64_t { return t.defined() ? int64_t(t.scalar_type()) : -1; };
  const auto device = [](const torch::Tensor& t) -> int64_t { return t.defined() ? int64_t(t.device().type()) : -1; };
  d[kQType] = type(q);
  d[kKType] = type(k);
  d[kVType] = type(v);
  d[kMaskType] = type(mask);
  d[kQDevice] = device(q);
  d[kKDevice] = device(k);
  d[kVDevice] = device(v);
  d[kMaskDevice] = device(mask);
  d[kCausal] = options.is_causal();
  d[kLayout] = static_cast<int64_t>(options.layout());
  d[kHasScale] = options.scale().has_value();
  d[kScaleBits] = 0;
  if (options.scale()) std::memcpy(&d[kScaleBits], &*options.scale(), sizeof(double));
  d[kDifferentiable] = differentiable;
  d[kStrategy] = static_cast<int64_t>(options.strategy());
  d[kTimeoutMs] = options.timeout().count();
  // Which of q, k, v need a gradient: Ulysses runs one backward all-to-all per such tensor.
  const auto needs = [&](const torch::Tensor& t) { return differentiable && t.defined() && t.requires_grad(); };
  d[kGradFlags] = (needs(q) ? 1 : 0) | (needs(k) ? 2 : 0) | (needs(v) ? 4 : 0);
  return d;
}

std::string shape_string(const std::vector<int64_t>& d, Field dim_field) {
  if (d[dim_field] < 0) return "undefined";
  std::ostringstream s;
  s << "[";
  for (int64_t i = 0; i < d[dim_field]; ++i) {
    if (i) s << ", ";
    if (i < (dim_field == kMaskDim ? 2 : 4)) s << d[dim_field + 1 + i];
    else s << "...";
  }
  s << "]";
  return s.str();
}

std::string type_string(int64_t t) {
  return t < 0 ? "undefined" : std::string(c10::toString(static_cast<c10::ScalarType>(t)));
}

/// What is wrong with one rank's own inputs, or "" (the same text on every rank: it reads only descriptors).
std::string check_own_inputs(const std::vector<int64_t>& d, int64_t r) {
  std::ostringstream e;
  const std::string who = "rank " + std::to_string(r) + "'s ";
  if (d[kQDim] != 4 || d[kKDim] != 4 || d[kVDim] != 4) {
    e << who << "q, k, v must be [B, H, T_local, d_k], [B, H_kv, T_local, d_k], [B, H_kv, T_local, d_v]; got q "
      << shape_string(d, kQDim) << ", k " << shape_string(d, kKDim) << ", v " << shape_string(d, kVDim);
    return e.str();
  }
  if (d[kQ0] != d[kK0] || d[kQ0] != d[kV0] || d[kK1] != d[kV1] || d[kK2] != d[kV2] || d[kQ2] != d[kK2] ||
      d[kQ3] != d[kK3] || d[kK1] < 1 || d[kQ1] % d[kK1] != 0) {
    e << who << "shapes do not fit together: q " << shape_string(d, kQDim) << ", k " << shape_string(d, kKDim)
      << ", v " << shape_string(d, kVDim)
      << " (expected q [B, H, T_local, d_k], k [B, H_kv, T_local, d_k], v [B, H_kv, T_local, d_v], H_kv dividing "
         "H: each rank's q, k and v hold the same positions)";
    return e.str();
  }
  const int64_t cpu = int64_t(c10::DeviceType::CPU), cuda = int64_t(c10::DeviceType::CUDA);
  if (d[kQDevice] != d[kKDevice] || d[kQDevice] != d[kVDevice] || (d[kQDevice] != cpu && d[kQDevice] != cuda)) {
    e << who << "q, k, v must all be CPU tensors (attn's fused CPU kernel runs the blocks) or all CUDA tensors "
               "(its CUDA kernels, over a group whose backend moves CUDA tensors, such as make_nccl_group's)";
    return e.str();
  }
  const int64_t t = d[kQType];
  const bool on_cuda = d[kQDevice] == cuda;
  const bool dtype_ok = on_cuda ? t == int64_t(torch::kHalf) || t == int64_t(torch::kBFloat16)
                                : t == int64_t(torch::kFloat) || t == int64_t(torch::kDouble) || t == int64_t(torch::kBFloat16);
  if (d[kKType] != t || d[kVType] != t || !dtype_ok) {
    e << who << "q, k, v must share one dtype of " << (on_cuda ? "float16 or bfloat16 on CUDA" : "float32, float64 or bfloat16 on the CPU")
      << "; got " << type_string(d[kQType]) << ", " << type_string(d[kKType]) << ", " << type_string(d[kVType]);
    return e.str();
  }
  if (d[kMaskDim] >= 0 && on_cuda) {
    e << who << "key_padding_mask is not supported with CUDA tensors (attn's CUDA kernels take no masks)";
    return e.str();
  }
  if (d[kMaskDim] >= 0 &&
      (d[kMaskDim] != 2 || d[kMask0] != d[kQ0] || d[kMask1] != d[kK2] || d[kMaskType] != int64_t(torch::kBool) ||
       d[kMaskDevice] != cpu)) {
    e << who << "key_padding_mask must be a CPU bool [B, T_local] = [" << d[kQ0] << ", " << d[kK2] << "]; got "
      << type_string(d[kMaskType]) << " " << shape_string(d, kMaskDim);
    return e.str();
  }
  return "";
}

}  // namespace

RingPlan agree_on_plan(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                       const RingAttentionOptions& options, c10d::ProcessGroup& group, bool differentiable) {
  const int world = group.getSize();
  const int rank = group.getRank();
  const std::vector<int64_t> own = describe(q, k, v, options, group, differentiable);

  // The descriptors travel where the inputs are: a group over NCCL moves CUDA tensors only.
  const auto descriptor = torch::TensorOptions().dtype(torch::kLong).device(q.defined() ? q.device() : torch::kCPU);
  std::vector<torch::Tensor> input{torch::tensor(own, torch::kLong).to(descriptor.device())};
  std::vector<std::vector<torch::Tensor>> output(1);
  for (int r = 0; r < world; ++r) output[0].push_back(torch::empty({kFieldCount}, descriptor));
  if (world > 1) {
    try {
      // A rank with a bad timeout still joins the all-gather (with the default), so that every rank reports it.
      const auto wait = options.timeout().count() > 0 ? options.timeout() : RingAttentionOptions().timeout();
      group.allgather(output, input)->wait(wait);
    } catch (const std::exception& error) {
      TORCH_CHECK(false, kRingAttention, ": rank ", rank, " of ", world,
                  ": the ranks could not compare their inputs (the all-gather before any exchange failed within "
                  "the timeout of ", options.timeout().count(), " ms). Every rank of the group must call "
                  "ring_attention collectively, in the same order. Cause: ", cause_of(error));
    }
  } else {
    output[0][0].copy_(input[0]);
  }
  std::vector<std::vector<int64_t>> all;
  for (const auto& on_device : output[0]) {
    const torch::Tensor t = on_device.to(torch::kCPU);
    const int64_t* p = t.data_ptr<int64_t>();
    all.emplace_back(p, p + kFieldCount);
  }

  // The same checks, in the same order, on every rank.
  for (int64_t r = 0; r < world; ++r) {
    TORCH_CHECK(all[r][kMagicField] == kMagic && all[r][kRank] == r && all[r][kWorld] == world, kRingAttention,
                ": rank ", rank, ": the descriptor from rank ", r,
                " is not a ring_attention descriptor for this group; another collective is interleaved with "
                "ring_attention on this group. Every rank must call collectively, in the same order");
  }
  for (int64_t r = 0; r < world; ++r) {
    TORCH_CHECK(all[r][kTimeoutMs] > 0, kRingAttention, ": rank ", r, "'s options.timeout must be positive, got ",
                all[r][kTimeoutMs], " ms");
  }
  for (int64_t r = 0; r < world; ++r) {
    const std::string problem = check_own_inputs(all[r], r);
    TORCH_CHECK(problem.empty(), kRingAttention, ": ", problem);
  }
  const std::vector<int64_t>& first = all[0];
  for (int64_t r = 1; r < world; ++r) {
    const std::vector<int64_t>& d = all[r];
    TORCH_CHECK(d[kQ0] == first[kQ0] && d[kQ1] == first[kQ1] && d[kK1] == first[kK1] && d[kQ3] == first[kQ3] &&
                    d[kV3] == first[kV3],
                kRingAttention, ": the ranks disagree on shapes: rank 0 has q ", shape_string(first, kQDim), ", k ",
                shape_string(first, kKDim), ", v ", shape_string(first, kVDim), "; rank ", r, " has q ",
                shape_string(d, kQDim), ", k ", shape_string(d, kKDim), ", v ", shape_string(d, kVDim),
                " (only T_local, dimension 2, may differ)");
    TORCH_CHECK(d[kQType] == first[kQType], kRingAttention, ": the ranks disagree on the dtype: rank 0 has ",
                type_string(first[kQType]), ", rank ", r, " has ", type_string(d[kQType]));
    TORCH_CHECK(d[kCausal] == first[kCausal] && d[kLayout] == first[kLayout] && d[kHasScale] == first[kHasScale] &&
                    d[kScaleBits] == first[kScaleBits] && d[kStrategy] == first[kStrategy],
                kRingAttention,
                ": the ranks disagree on the options (strategy, is_causal, layout or scale): rank 0 has strategy=",
                to_string(static_cast<ContextParallelStrategy>(first[kStrategy])), " is_causal=", first[kCausal],
                " layout=", to_string(static_cast<SequenceLayout>(first[kLayout])), " and ",
                first[kHasScale] ? "a scale" : "no scale", "; rank ", r,
                " has strategy=", to_string(static_cast<ContextParallelStrategy>(d[kStrategy])),
                " is_causal=", d[kCausal], " layout=", to_string(static_cast<SequenceLayout>(d[kLayout])), " and ",
                d[kHasScale] ? "a scale" : "no scale", (d[kHasScale] && first[kHasScale] ? " (they differ)" : ""));
    TORCH_CHECK((d[kMaskDim] >= 0) == (first[kMaskDim] >= 0), kRingAttention,
                ": the ranks disagree on key_padding_mask: rank 0 ", first[kMaskDim] >= 0 ? "passes" : "does not pass",
                " one, rank ", r, d[kMaskDim] >= 0 ? " passes one" : " does not");
    TORCH_CHECK(d[kDifferentiable] == first[kDifferentiable], kRingAttention,
                ": the ranks disagree on whether the call is differentiable (q, k or v requiring grad under grad "
                "mode): rank 0 ", first[kDifferentiable] ? "is" : "is not", ", rank ", r,
                d[kDifferentiable] ? " is" : " is not", "; the backward pass is collective too");
  }

  if (static_cast<ContextParallelStrategy>(first[kStrategy]) == ContextParallelStrategy::Ulysses) {
    for (int64_t r = 1; r < world; ++r) {
      TORCH_CHECK(all[r][kGradFlags] == first[kGradFlags], kRingAttention,
                  ": the ranks disagree on which of q, k, v require grad (Ulysses runs one backward all-to-all "
                  "for each): rank 0 has flags ", first[kGradFlags], ", rank ", r, " has ", all[r][kGradFlags],
                  " (1 = q, 2 = k, 4 = v)");
    }
  }

  RingPlan plan;
  plan.rank = rank;
  plan.world = world;
  for (int64_t r = 0; r < world; ++r) plan.lengths.push_back(all[r][kQ2]);
  for (int64_t n : plan.lengths) plan.seq_len += n;
  const SequenceLayout layout = options.layout();
  const std::vector<int64_t> expected = shard_lengths(plan.seq_len, world, layout);
  TORCH_CHECK(plan.lengths == expected, kRingAttention, ": the shards do not follow the ", to_string(layout),
              " layout: the ranks hold ", c10::ArrayRef<int64_t>(plan.lengths), " positions (", plan.seq_len,
              " in all), but that layout over ", world, " ranks gives them ", c10::ArrayRef<int64_t>(expected),
              "; cut the shards with attn::distributed::shard_sequence");
  for (int64_t r = 0; r < world; ++r) plan.segments.push_back(shard_segments(plan.seq_len, r, world, layout));
  plan.batch = first[kQ0];
  plan.heads = first[kQ1];
  plan.kv_heads = first[kK1];
  plan.head_dim_qk = first[kQ3];
  plan.head_dim_v = first[kV3];
  plan.dtype = static_cast<torch::ScalarType>(first[kQType]);
  plan.device = q.device();
  plan.is_causal = first[kCausal];
  plan.has_padding = first[kMaskDim] >= 0;
  plan.strategy = static_cast<ContextParallelStrategy>(first[kStrategy]);
  plan.layout = layout;
  TORCH_CHECK(
      plan.strategy != ContextParallelStrategy::Ulysses || (plan.heads % world == 0 && plan.kv_heads % world == 0),
      kRingAttention, ": the Ulysses strategy gives each rank H/N query heads and H_kv/N K/V heads, so the ", world,
      " ranks must divide H = ", plan.heads, " and H_kv = ", plan.kv_heads, "; use the Ring strategy");
  plan.scale = options.scale();
  plan.timeout = options.timeout();
  return plan;
}

}  // namespace attn::distributed::detail
