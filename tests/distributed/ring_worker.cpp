// The rank side of tests/distributed/test_ring_attention.cpp. Every rank builds the same whole problem from
// one seed, keeps its shard, runs ring attention over a Gloo group on loopback, and compares its rows of the
// output, the log-sum-exp and every gradient with attention computed by one process on the whole sequence.

#include "ring_worker.h"

#include <attn/attn.h>
#include <attn/distributed/gloo.h>
#include <attn/distributed/ring_attention.h>
#include <attn/ops/flash_attention.h>

#include <torch/csrc/distributed/c10d/FileStore.hpp>
#include <torch/torch.h>

#include <csignal>
#include <cstdio>
#include <iostream>
#include <map>
#include <sstream>
#include <thread>

namespace attn::test::ring {
namespace {

namespace dist = attn::distributed;

/// "key=value:key=value" -> map
std::map<std::string, std::string> parse_case(const std::string& text) {
  std::map<std::string, std::string> fields;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ':')) {
    const auto eq = item.find('=');
    fields[item.substr(0, eq)] = eq == std::string::npos ? "1" : item.substr(eq + 1);
  }
  return fields;
}

struct Problem {
  torch::Dtype dtype = torch::kFloat;
  bool causal = false;
  dist::SequenceLayout layout = dist::SequenceLayout::Zigzag;
  int64_t batch = 2, seq_len = 37, heads = 4, kv_heads = 4, dim = 16, value_dim = 16;
  bool padding = false;
  bool dynamic_ntk = false;  // the module's rotary: dynamic NTK, whose frequencies depend on the sequence's length
  std::optional<double> scale;
  dist::ContextParallelStrategy strategy = dist::ContextParallelStrategy::Ring;
};

Problem problem_of(const std::map<std::string, std::string>& f) {
  Problem p;
  const auto get = [&](const char* key, const std::string& fallback) {
    auto it = f.find(key);
    return it == f.end() ? fallback : it->second;
  };
  const std::string dtype = get("dtype", "float32");
  p.dtype = dtype == "float64" ? torch::kDouble : dtype == "bfloat16" ? torch::kBFloat16 : torch::kFloat;
  p.causal = get("causal", "0") == "1";
  p.layout = get("layout", "zigzag") == "contiguous" ? dist::SequenceLayout::Contiguous : dist::SequenceLayout::Zigzag;
  p.seq_len = std::stoll(get("T", "37"));
  p.heads = std::stoll(get("H", "4"));
  p.kv_heads = std::stoll(get("Hkv", "4"));
  p.dim = std::stoll(get("d", "16"));
  p.value_dim = std::stoll(get("dv", get("d", "16")));
  p.padding = get("pad", "0") == "1";
  p.dynamic_ntk = get("ntk", "0") == "1";
  if (f.count("scale")) p.scale = std::stod(get("scale", "1"));
  if (get("strategy", "ring") == "ulysses") p.strategy = dist::ContextParallelStrategy::Ulysses;
  return p;
}

/// Largest |a - b| relative to max|b| (so that one number describes a whole tensor).
double relative_error(const torch::Tensor& actual, const torch::Tensor& expected) {
  if (!actual.sizes().equals(expected.sizes())) return std::numeric_limits<double>::infinity();
  if (expected.numel() == 0) return 0.0;  // a rank that holds no positions (T < 2N)
  const auto a = actual.to(torch::kDouble);
  const auto e = expected.to(torch::kDouble);
  const auto finite = torch::isfinite(e);
  if (!torch::equal(torch::isfinite(a), finite)) return std::numeric_limits<double>::infinity();
  const double scale = std::max(1.0, e.masked_fill(~finite, 0).abs().max().item<double>());
  return (a - e).masked_fill(~finite, 0).abs().max().item<double>() / scale;
}

double tolerance_of(torch::Dtype dtype) {
  return dtype == torch::kDouble ? 1e-10 : dtype == torch::kFloat ? 1e-5 : 2e-2;
}

int run_parity(const Problem& p, int rank, int world, const c10::intrusive_ptr<c10d::ProcessGroup>& group,
               std::chrono::milliseconds timeout) {
  torch::manual_seed(1234);
  const auto options = torch::TensorOptions().dtype(p.dtype);
  const torch::Tensor q = torch::randn({p.batch, p.heads, p.seq_len, p.dim}, options);
  const torch::Tensor k = torch::randn({p.batch, p.kv_heads, p.seq_len, p.dim}, options);
  const torch::Tensor v = torch::randn({p.batch, p.kv_heads, p.seq_len, p.value_dim}, options);
  const torch::Tensor grad = torch::randn({p.batch, p.heads, p.seq_len, p.value_dim}, options);
  // Padding: every fifth key of row 0, the first key of row 1 (so that under a causal mask query 0 of row 1
  // may attend no key: a zero row with log-sum-exp -inf).
  torch::Tensor padding;
  if (p.padding) {
    padding = torch::zeros({p.batch, p.seq_len}, torch::kBool);
    padding[0].slice(0, 0, p.seq_len, 5).fill_(true);
    padding[1][0] = true;
  }

  // One process, the whole sequence.
  const torch::Tensor rq = q.clone().requires_grad_(), rk = k.clone().requires_grad_(), rv = v.clone().requires_grad_();
  attn::ops::FlashArguments whole;
  if (p.padding) whole.key_padding_mask = padding.unsqueeze(1);
  whole.is_causal = p.causal;
  if (p.scale) whole.scale = *p.scale;
  auto [ref_out, ref_lse] = attn::ops::flash_attention(rq, rk, rv, whole);
  (ref_out.to(torch::kDouble) * grad.to(torch::kDouble)).sum().backward();

  // This rank's shard, through the ring.
  const auto shard = [&](const torch::Tensor& x, int64_t dim) {
    return dist::shard_sequence(x, dim, rank, world, p.layout);
  };
  const torch::Tensor sq = shard(q, 2).requires_grad_(), sk = shard(k, 2).requires_grad_(),
                      sv = shard(v, 2).requires_grad_();
  auto stats = std::make_shared<dist::RingAttentionStats>();
  auto ring_options =
      dist::RingAttentionOptions().strategy(p.strategy).is_causal(p.causal).layout(p.layout).scale(p.scale)
          .timeout(timeout).stats(stats);
  if (p.padding) ring_options.key_padding_mask(shard(padding, 1));
  // Two calls on the same group (the tags are reused): the first without gradients, the second with.
  {
    torch::NoGradGuard no_grad;
    const torch::Tensor first = dist::ring_attention(sq, sk, sv, group, ring_options);
    if (relative_error(first, shard(ref_out.detach(), 2)) > tolerance_of(p.dtype)) {
      std::cout << "rank " << rank << ": the call without gradients differs from one process" << std::endl;
      return kExitMismatch;
    }
  }
  stats->hops = 0;
  auto [out, lse] = dist::ring_attention_with_lse(sq, sk, sv, group, ring_options);
  (out.to(torch::kDouble) * shard(grad, 2).to(torch::kDouble)).sum().backward();

  const double tol = tolerance_of(p.dtype);
  const std::vector<std::pair<const char*, double>> errors = {
      {"output", relative_error(out, shard(ref_out.detach(), 2))},
      {"lse", relative_error(lse, shard(ref_lse, 2))},
      {"dq", relative_error(sq.grad(), shard(rq.grad(), 2))},
      {"dk", relative_error(sk.grad(), shard(rk.grad(), 2))},
      {"dv", relative_error(sv.grad(), shard(rv.grad(), 2))},
  };
  bool pass = true;
  std::cout << "rank " << rank << ":";
  for (const auto& [name, error] : errors) {
    std::cout << " " << name << " " << error;
    pass = pass && error <= tol;
  }
  std::cout << " (tolerance " << tol << "); sent " << stats->bytes_sent << " bytes in " << stats->hops << " hops"
            << std::endl;
  // Ring: forward K/V, backward K/V, dK/dV. Ulysses: all-to-alls of q, k, v, the output and the log-sum-exp,
  // (the key padding), then of the output's gradient and of dq, dk, dv.
  const int64_t expected_hops = p.strategy == dist::ContextParallelStrategy::Ulysses ? 9 + (p.padding ? 1 : 0)
                                : world > 1 ? 3 * (world - 1) + 1 : 0;
  if (stats->hops != expected_hops) {
    std::cout << "rank " << rank << ": expected " << expected_hops << " hops, counted " << stats->hops << std::endl;
    pass = false;
  }
  return pass ? kExitPass : kExitMismatch;
}

/// context_parallel(mha, x) against mha(x) on the whole sequence: outputs, dx, and the parameters' gradients
/// (summed over the ranks with an all-reduce, as data-parallel training would).
int run_module(const Problem& p, int rank, int world, const c10::intrusive_ptr<c10d::ProcessGroup>& group,
               std::chrono::milliseconds timeout) {
  torch::manual_seed(99);
  const int64_t embed = p.heads * p.dim;
  auto mha = attn::MultiHeadAttention(attn::MultiHeadAttentionOptions(embed, p.heads)
                                          .num_kv_heads(p.kv_heads)
                                          .causal(p.causal)
                                          .rotary(p.dynamic_ntk ? attn::RotaryEmbeddingOptions(p.dim)
                                                                      .scaling(attn::RotaryScaling::DynamicNTK)
                                                                      .factor(4)
                                                                      .original_max_position(8)
                                                                : attn::RotaryEmbeddingOptions(p.dim))
                                          .backend(attn::Backend::Fused));
  mha->to(p.dtype);
  const torch::Tensor x = torch::randn({p.batch, p.seq_len, embed}, torch::TensorOptions().dtype(p.dtype));
  const torch::Tensor grad = torch::randn_like(x);

  const torch::Tensor rx = x.clone().requires_grad_();
  (mha->forward(rx, rx, rx) * grad).sum().backward();
  const torch::Tensor ref_weight_grad = mha->q_proj->weight.grad().clone();

  const torch::Tensor ref_k_grad = mha->k_proj->weight.grad().clone();
  const torch::Tensor ref_out_grad = mha->out_proj->weight.grad().clone();
  mha->zero_grad();

  // Without options, context_parallel takes the module's causal and the default (zigzag) layout.
  const bool default_options = p.layout == dist::SequenceLayout::Zigzag && p.strategy == dist::ContextParallelStrategy::Ring;
  const auto options =
      dist::RingAttentionOptions().strategy(p.strategy).layout(p.layout).timeout(timeout);  // causal from the module
  const torch::Tensor sx = dist::shard_sequence(x, 1, rank, world, p.layout).requires_grad_();
  const torch::Tensor out = default_options ? dist::context_parallel(mha, sx, group)
                                            : dist::context_parallel(mha, sx, group, options);
  (out * dist::shard_sequence(grad, 1, rank, world, p.layout)).sum().backward();
  std::vector<torch::Tensor> weight_grad{mha->q_proj->weight.grad().clone()};
  std::vector<torch::Tensor> k_grad{mha->k_proj->weight.grad().clone()};
  std::vector<torch::Tensor> out_grad{mha->out_proj->weight.grad().clone()};
  if (world > 1) {
    group->allreduce(weight_grad)->wait(timeout);
    group->allreduce(k_grad)->wait(timeout);
    group->allreduce(out_grad)->wait(timeout);
  }

  const double tol = tolerance_of(p.dtype);
  const double e_out = relative_error(out, dist::shard_sequence(mha->forward(x, x, x).detach(), 1, rank, world, p.layout));
  const double e_dx = relative_error(sx.grad(), dist::shard_sequence(rx.grad(), 1, rank, world, p.layout));
  const double e_dw = std::max({relative_error(weight_grad[0], ref_weight_grad), relative_error(k_grad[0], ref_k_grad),
                                relative_error(out_grad[0], ref_out_grad)});
  std::cout << "rank " << rank << ": output " << e_out << " dx " << e_dx << " dW_q,k,out " << e_dw << " (tolerance " << tol
            << ")" << std::endl;
  return e_out <= tol && e_dx <= tol && e_dw <= tol ? kExitPass : kExitMismatch;
}

/// Rank 1 holds one position fewer than the layout gives it: every rank must report it.
int run_disagreement(int rank, int world, const c10::intrusive_ptr<c10d::ProcessGroup>& group,
                     std::chrono::milliseconds timeout, const std::string& what) {
  const int64_t t = 12;
  int64_t local = dist::shard_lengths(t * world, world, dist::SequenceLayout::Zigzag)[rank];
  int64_t heads = 2;
  if (rank == 1 && what == "length") local -= 1;
  if (rank == 1 && what == "heads") heads = 4;
  const auto dtype = rank == 1 && what == "dtype" ? torch::kDouble : torch::kFloat;
  const torch::Tensor q = torch::randn({1, heads, local, 8}, dtype).requires_grad_(rank == 1 && what == "ulysses_grad");
  const torch::Tensor kv = torch::randn({1, heads, local, 8}, dtype).requires_grad_(what == "ulysses_grad");
  auto options = dist::RingAttentionOptions().is_causal(rank == 1 && what == "causal" ? false : true).timeout(timeout);
  if (what == "ulysses_heads" || what == "ulysses_grad") options.strategy(dist::ContextParallelStrategy::Ulysses);
  try {
    dist::ring_attention(q, kv, kv, group, options);
  } catch (const c10::Error& error) {
    std::cout << "rank " << rank << " error: " << error.what_without_backtrace() << std::endl;
    return kExitCleanError;
  }
  std::cout << "rank " << rank << ": no error" << std::endl;
  return kExitPass;
}

/// context_parallel on a module it cannot run (here keys and values of another width than the sequence's):
/// every rank refuses it before any exchange.
int run_module_refused(int rank, const c10::intrusive_ptr<c10d::ProcessGroup>& group) {
  auto mha = attn::MultiHeadAttention(attn::MultiHeadAttentionOptions(16, 2).kdim(8).vdim(8));
  try {
    dist::context_parallel(mha, torch::randn({1, 6, 16}), group);
  } catch (const c10::Error& error) {
    std::cout << "rank " << rank << " error: " << error.what_without_backtrace() << std::endl;
    return kExitCleanError;
  }
  std::cout << "rank " << rank << ": no error" << std::endl;
  return kExitPass;
}

/// Rank 1 forms the group but never calls ring_attention (it sleeps past rank 0's timeout, then exits).
int run_idle(int rank, const c10::intrusive_ptr<c10d::ProcessGroup>& group, std::chrono::milliseconds timeout) {
  if (rank == 1) {
    std::this_thread::sleep_for(timeout + std::chrono::seconds(3));
    return kExitPass;
  }
  const torch::Tensor q = torch::randn({1, 2, 8, 8});
  try {
    dist::ring_attention(q, q, q, group, dist::RingAttentionOptions().timeout(timeout));
  } catch (const c10::Error& error) {
    std::cout << "rank " << rank << " error: " << error.what_without_backtrace() << std::endl;
    return kExitCleanError;
  }
  return kExitPass;
}

/// Rank 1 dies (SIGKILL) while the ring runs; the others must end with an error, not hang or abort.
int run_killed(int rank, int world, const c10::intrusive_ptr<c10d::ProcessGroup>& group,
               std::chrono::milliseconds timeout) {
  const int64_t t = 4096 * world;
  const int64_t local = dist::shard_lengths(t, world, dist::SequenceLayout::Zigzag)[rank];
  const torch::Tensor q = torch::randn({1, 4, local, 64});
  if (rank == 1) {
    std::thread([] {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      std::raise(SIGKILL);
    }).detach();
  }
  try {
    for (int i = 0; i < 20; ++i) {  // long enough that rank 1 dies inside a call
      dist::ring_attention(q, q, q, group, dist::RingAttentionOptions().is_causal(true).timeout(timeout));
    }
  } catch (const c10::Error& error) {
    std::cout << "rank " << rank << " error: " << error.what_without_backtrace() << std::endl;
    return kExitCleanError;
  }
  std::cout << "rank " << rank << ": no error" << std::endl;
  return kExitPass;
}

}  // namespace

int worker_main(int argc, char** argv) {
  if (argc < 7) {
    std::cerr << "usage: " << argv[0] << " --ring-worker CASE RANK WORLD STORE_PATH TIMEOUT_MS" << std::endl;
    return kExitSetupFailed;
  }
  const std::string name = argv[2];
  const int rank = std::stoi(argv[3]);
  const int world = std::stoi(argv[4]);
  const std::string store_path = argv[5];
  const std::chrono::milliseconds timeout(std::stoll(argv[6]));
  torch::set_num_threads(1);
  const auto fields = parse_case(name);
  c10::intrusive_ptr<c10d::ProcessGroup> group;
  try {
    auto store = c10::make_intrusive<c10d::FileStore>(store_path, world);
    group = dist::make_gloo_group(rank, world, store, "127.0.0.1", timeout);
  } catch (const c10::Error& error) {
    std::cout << "rank " << rank << " error: " << error.what_without_backtrace() << std::endl;
    return kExitCleanError;
  }
  try {
    const std::string kind = fields.count("case") ? fields.at("case") : "parity";
    if (kind == "parity") return run_parity(problem_of(fields), rank, world, group, timeout);
    if (kind == "module") return run_module(problem_of(fields), rank, world, group, timeout);
    if (kind == "disagree") return run_disagreement(rank, world, group, timeout, fields.at("what"));
    if (kind == "killed") return run_killed(rank, world, group, timeout);
    if (kind == "module_refused") return run_module_refused(rank, group);
    if (kind == "idle") return run_idle(rank, group, timeout);
    std::cout << "unknown case " << kind << std::endl;
    return kExitSetupFailed;
  } catch (const std::exception& error) {
    std::cout << "rank " << rank << " unexpected error: " << error.what() << std::endl;
    return kExitSetupFailed;
  }
}

}  // namespace attn::test::ring
