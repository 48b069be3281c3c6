// attn-ring: runs ring attention (attn::distributed::ring_attention) forward and backward on N local ranks,
// then the same attention in one process, and reports the times, the speedup, the bytes each rank sent, the
// fraction of communication hidden behind compute, peak memory, and the largest difference from one process.

#include "app_main.h"
#include "command_line.h"
#include "counted.h"

#include <attn/distributed/gloo.h>
#include <attn/distributed/ring_attention.h>
#include <attn/ops/flash_attention.h>

#include <fmt/core.h>
#include <torch/csrc/distributed/c10d/FileStore.hpp>
#include <torch/torch.h>

#include <ftw.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <thread>
#include <vector>

extern char** environ;

namespace {

namespace dist = attn::distributed;
using Clock = std::chrono::steady_clock;

const char* kHelp = R"(attn-ring: context-parallel attention (ring attention over Gloo) on N local processes

Usage: attn-ring [options]

Starts N ranks of this program on this machine, each holding 1/N of the sequence, runs ring attention's forward
and backward passes, then the same attention in one process with the same threads per process, and prints:
the median time of each (a barrier before each repeat; a ring repeat lasts until its slowest rank ends), the
speedup, the bytes each rank sent, the share of communication hidden behind compute, peak memory per process,
and the largest relative difference of the output and the gradients from one process.

Options:
  --ranks N            processes in the ring (default 2)
  --seq T              whole sequence length (default 16384)
  --batch B            (default 1)
  --heads H            query heads (default 8)
  --kv-heads H_KV      key/value heads, dividing H (default H)
  --head-dim D         (default 64)
  --strategy S         ring | ulysses (default ring; ulysses needs N to divide H and H_kv)
  --layout L           zigzag | contiguous (default zigzag)
  --no-causal          full attention (default causal)
  --dtype T            float32 | float64 | bfloat16 (default float32)
  --threads-per-rank K intra-op threads of each process, the single one included (default 1)
  --repeats R          timed repeats after one warm-up (default 3)
  --timeout-s S        the ring's timeout per exchange (default 300)
  -h, --help           this text

Values may also be given as --option=VALUE.

Example:
  attn-ring --ranks 2 --seq 8192 --strategy ulysses --dtype bfloat16

Exit status: 0 when the ring matched one process, 1 when a rank failed or the results differ, 2 for bad usage.
)";

struct Config {
  int ranks = 2;
  int64_t seq = 16384, batch = 1, heads = 8, kv_heads = -1, head_dim = 64;
  dist::SequenceLayout layout = dist::SequenceLayout::Zigzag;
  dist::ContextParallelStrategy strategy = dist::ContextParallelStrategy::Ring;
  bool causal = true;
  torch::Dtype dtype = torch::kFloat;
  std::string dtype_name = "float32";
  int threads = 1, repeats = 3, timeout_s = 300;
};

std::vector<std::string> config_args(const Config& c) {
  return {"--ranks", std::to_string(c.ranks), "--seq", std::to_string(c.seq), "--batch", std::to_string(c.batch),
          "--heads", std::to_string(c.heads), "--kv-heads", std::to_string(c.kv_heads), "--head-dim",
          std::to_string(c.head_dim), "--layout", dist::to_string(c.layout), "--strategy", dist::to_string(c.strategy),
          "--dtype", c.dtype_name,
          "--threads-per-rank", std::to_string(c.threads), "--repeats", std::to_string(c.repeats), "--timeout-s",
          std::to_string(c.timeout_s), c.causal ? "--causal" : "--no-causal"};
}

struct Inputs {
  torch::Tensor q, k, v, grad;
};

/// Positions [start, start + length) of one input tensor, the same values whichever process makes them: the
/// sequence is drawn in blocks of 128 positions, each from its own seed, so that a rank makes only its shard
/// (and its peak memory is its share).
torch::Tensor rows(const Config& c, int which, int64_t heads, int64_t start, int64_t length) {
  constexpr int64_t kBlock = 128;
  std::vector<torch::Tensor> blocks;
  const int64_t first = start / kBlock;
  for (int64_t b = first; b * kBlock < start + length; ++b) {
    torch::manual_seed(1000003 * which + b);
    blocks.push_back(torch::randn({c.batch, heads, kBlock, c.head_dim}, torch::TensorOptions().dtype(c.dtype)));
  }
  if (blocks.empty()) return torch::empty({c.batch, heads, 0, c.head_dim}, torch::TensorOptions().dtype(c.dtype));
  return torch::cat(blocks, 2).narrow(2, start - first * kBlock, length).contiguous();
}

/// The inputs at the positions `segments` name, in their local order.
Inputs make_inputs(const Config& c, const std::vector<dist::SequenceSegment>& segments) {
  Inputs in;
  const auto make = [&](int which, int64_t heads) {
    std::vector<torch::Tensor> parts;
    for (const auto& s : segments) parts.push_back(rows(c, which, heads, s.start, s.length));
    return parts.empty() ? rows(c, which, heads, 0, 0) : torch::cat(parts, 2);
  };
  return {make(0, c.heads), make(1, c.kv_heads), make(2, c.kv_heads), make(3, c.heads)};
}

void save(const torch::Tensor& t, const std::string& path) {
  const torch::Tensor c = t.contiguous().to(torch::kDouble);
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(c.data_ptr<double>()), c.numel() * sizeof(double));
  TORCH_CHECK(out.good(), "could not write ", path);
}

torch::Tensor load(const std::string& path, std::vector<int64_t> sizes) {
  torch::Tensor t = torch::empty(sizes, torch::kDouble);
  std::ifstream in(path, std::ios::binary);
  in.read(reinterpret_cast<char*>(t.data_ptr<double>()), t.numel() * sizeof(double));
  TORCH_CHECK(in.good(), "could not read ", path);
  return t;
}

double peak_rss_mib() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_maxrss / 1024.0;
}

/// Resident memory now (VmRSS), MiB.
double rss_mib() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stod(line.substr(6)) / 1024.0;
  }
  return 0.0;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

/// A line per forward + backward, from the single process or ring rank 0 (the workers share the app's stdout):
/// a long run shows that it moves.
void print_progress(const char* who, int i, int repeats, double seconds) {
  if (i == 0) {
    fmt::print("    {}: warm-up in {:.2f} s\n", who, seconds);
  } else {
    fmt::print("    {}: repeat {} of {} in {:.2f} s\n", who, i, repeats, seconds);
  }
  std::fflush(stdout);
}

/// One rank (rank >= 0) or the single process (rank -1): writes its results and measurements under dir.
int worker(const Config& c, int rank, const std::string& dir) {
  // A worker ends with the program that started it (killed, or stopped by Ctrl-C), not minutes later.
  ::prctl(PR_SET_PDEATHSIG, SIGTERM);
  if (::getppid() == 1) return 1;  // it ended before the line above
  torch::set_num_threads(c.threads);
  torch::zeros({1}).add_(1);  // LibTorch loaded and initialised: what the process holds before any input
  const double fixed_mib = rss_mib();
  Inputs in = make_inputs(c, rank < 0 ? std::vector<dist::SequenceSegment>{{0, c.seq, 0}}
                                      : dist::shard_segments(c.seq, rank, c.ranks, c.layout));
  const std::string prefix = dir + "/" + (rank < 0 ? std::string("single") : "rank" + std::to_string(rank));
  std::vector<double> times;
  torch::Tensor out, dq, dk, dv;
  std::ofstream report(prefix + ".txt");
  if (rank < 0) {
    for (int i = 0; i <= c.repeats; ++i) {
      const torch::Tensor q = in.q.clone().requires_grad_(), k = in.k.clone().requires_grad_(),
                          v = in.v.clone().requires_grad_();
      const auto start = Clock::now();
      attn::ops::FlashArguments arguments;
      arguments.is_causal = c.causal;
      out = std::get<0>(attn::ops::flash_attention(q, k, v, arguments));
      out.backward(in.grad);
      const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
      if (i > 0) times.push_back(seconds);
      print_progress("single process", i, c.repeats, seconds);
      dq = q.grad(), dk = k.grad(), dv = v.grad();
    }
    report << median(times) << " " << peak_rss_mib() - fixed_mib << " 0 0 0 0 " << fixed_mib << "\n";
  } else {
    auto store = c10::make_intrusive<c10d::FileStore>(dir + "/store", c.ranks);
    auto group = dist::make_gloo_group(rank, c.ranks, store, "127.0.0.1", std::chrono::seconds(c.timeout_s));
    const torch::Tensor sq0 = in.q, sk0 = in.k, sv0 = in.v, sgrad = in.grad;  // this rank's shard only
    std::shared_ptr<dist::RingAttentionStats> stats;
    std::vector<torch::Tensor> token{torch::zeros({1})};
    for (int i = 0; i <= c.repeats; ++i) {
      group->allreduce(token)->wait();  // a barrier: every rank starts the repeat together
      stats = std::make_shared<dist::RingAttentionStats>();
      const torch::Tensor q = sq0.clone().requires_grad_(), k = sk0.clone().requires_grad_(),
                          v = sv0.clone().requires_grad_();
      const auto start = Clock::now();
      out = dist::ring_attention(q, k, v, group,
                                 dist::RingAttentionOptions().strategy(c.strategy).is_causal(c.causal).layout(c.layout).stats(stats)
                                     .timeout(std::chrono::seconds(c.timeout_s)));
      out.backward(sgrad);
      std::vector<torch::Tensor> elapsed{torch::tensor({std::chrono::duration<double>(Clock::now() - start).count()},
                                                       torch::kDouble)};
      c10d::AllreduceOptions max;
      max.reduceOp = c10d::ReduceOp::MAX;
      group->allreduce(elapsed, max)->wait();  // a repeat lasts until its slowest rank ends
      if (i > 0) times.push_back(elapsed[0].item<double>());
      if (rank == 0) print_progress("ring", i, c.repeats, elapsed[0].item<double>());
      dq = q.grad(), dk = k.grad(), dv = v.grad();
    }
    // The same hops without compute: how long the communication takes when nothing hides it. Each hop sends
    // this rank's shard size and receives the previous rank's (shards differ by a position when N ∤ T).
    const auto lengths = dist::shard_lengths(c.seq, c.ranks, c.layout);
    const int previous = (rank + c.ranks - 1) % c.ranks;
    const auto kv_numel = [&](int r) { return 2 * c.batch * c.kv_heads * lengths[r] * c.head_dim; };
    const auto gradient_type = c.dtype == torch::kDouble ? torch::kDouble : torch::kFloat;
    group->allreduce(token)->wait();
    const auto comm_start = Clock::now();
    const bool ring_hops = c.strategy == dist::ContextParallelStrategy::Ring;
    // Only the K/V hops (forward and backward): a dK/dV hop's wait in the ring includes the peer's compute.
    for (int hop = 0; ring_hops && hop < 2 * (c.ranks - 1); ++hop) {
      // Forward and backward K/V: the held shard moves on, so hop h receives the shard of rank r-h-1.
      const bool gradients = hop >= 2 * (c.ranks - 1);
      const int step = gradients ? hop - 2 * (c.ranks - 1) : hop % (c.ranks - 1);
      const int from = (rank - step - 1 + 2 * c.ranks) % c.ranks;
      const int held = (rank - step + 2 * c.ranks) % c.ranks;
      std::vector<torch::Tensor> s{gradients ? torch::zeros({kv_numel(held)}, gradient_type)
                                             : torch::zeros({kv_numel(held)}, sk0.options())};
      std::vector<torch::Tensor> r{gradients ? torch::empty({kv_numel(from)}, gradient_type)
                                             : torch::empty({kv_numel(from)}, sk0.options())};
      auto rw = group->recv(r, previous, 7);
      auto sw = group->send(s, (rank + 1) % c.ranks, 7);
      sw->wait();
      rw->wait();
    }
    const double comm_only = std::chrono::duration<double>(Clock::now() - comm_start).count();
    report << median(times) << " " << peak_rss_mib() - fixed_mib << " " << stats->bytes_sent << " "
           << stats->keys_values_wait_seconds << " " << comm_only << " " << stats->wait_seconds << " " << fixed_mib
           << "\n";
  }
  save(out, prefix + ".out");
  save(dq, prefix + ".dq");
  save(dk, prefix + ".dk");
  save(dv, prefix + ".dv");
  return report.good() ? 0 : 1;
}

/// The workers running now, for the signal handler (a fixed array: the handler may not allocate).
constexpr int kMaxWorkers = 65;
volatile sig_atomic_t running_count = 0;
pid_t running[kMaxWorkers];
volatile sig_atomic_t stop_signal = 0;

/// SIGINT or SIGTERM: pass it on to the workers; the program then waits for them, removes its temporary folder
/// and ends with the signal.
extern "C" void on_stop_signal(int signal) {
  stop_signal = signal;
  for (sig_atomic_t i = 0; i < running_count; ++i) ::kill(running[i], SIGTERM);
}

void handle_stop_signals() {
  struct sigaction action {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = 0;  // no SA_RESTART: waitpid returns with EINTR, and the program checks stop_signal
  ::sigaction(SIGINT, &action, nullptr);
  ::sigaction(SIGTERM, &action, nullptr);
}

/// The folder the ranks share their files in, removed however the program ends (a failed rank, a signal).
struct TemporaryFolder {
  std::string path;
  TemporaryFolder() {
    const char* tmp = std::getenv("TMPDIR");
    std::string pattern = std::string(tmp && *tmp ? tmp : "/tmp") + "/attn-ring-XXXXXX";
    TORCH_CHECK(::mkdtemp(pattern.data()) != nullptr, "could not make a temporary folder ", pattern, ": ",
                std::strerror(errno));
    path = pattern;
  }
  TemporaryFolder(const TemporaryFolder&) = delete;
  TemporaryFolder& operator=(const TemporaryFolder&) = delete;
  ~TemporaryFolder() { remove(); }
  void remove() {
    if (path.empty()) return;
    // nftw, not std::filesystem::remove_all: a LibTorch wheel (2.11) exports a copy of it that crashes when code
    // built with a newer GCC calls it.
    ::nftw(path.c_str(), [](const char* p, const struct stat*, int, struct FTW*) { return ::remove(p); }, 16,
           FTW_DEPTH | FTW_PHYS);
    path.clear();
  }
};

/// Ends the program with the signal it was stopped by, once the workers are gone and the folder removed.
void end_if_stopped(TemporaryFolder& folder) {
  if (!stop_signal) return;
  const int signal = stop_signal;
  folder.remove();
  ::signal(signal, SIG_DFL);
  ::raise(signal);
}

/// Starts the processes and waits for all of them; a stop signal reaches each of them.
void run_all(const std::string& self, const std::vector<std::vector<std::string>>& commands, const char* what,
             TemporaryFolder& folder) {
  TORCH_CHECK(commands.size() <= static_cast<size_t>(kMaxWorkers), "too many processes");
  std::vector<pid_t> pids;
  for (const auto& args : commands) {
    if (stop_signal) break;
    std::vector<char*> argv;
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    pid_t pid = 0;
    TORCH_CHECK(posix_spawn(&pid, self.c_str(), nullptr, nullptr, argv.data(), environ) == 0,
                "could not start ", self);
    pids.push_back(pid);
    running[running_count] = pid;
    running_count = running_count + 1;
  }
  if (stop_signal) on_stop_signal(stop_signal);  // a worker started after the signal arrived
  bool ok = true;
  for (pid_t pid : pids) {
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    ok = ok && WIFEXITED(status) && WEXITSTATUS(status) == 0;
  }
  running_count = 0;
  end_if_stopped(folder);
  TORCH_CHECK(ok, "a process of the ", what, " failed (its message is above)");
}

std::vector<double> read_report(const std::string& path) {
  std::ifstream in(path);
  std::vector<double> v(7);
  for (double& x : v) in >> x;
  TORCH_CHECK(in.good() || in.eof(), "could not read ", path);
  return v;
}

int run(int argc, char** argv) {
  Config c;
  int worker_rank = -2;
  std::string dir;
  attn_apps::CommandLine cl;
  using attn_apps::parse_integer;
  cl.add_option("--ranks", [&](const std::string& s) { c.ranks = parse_integer<int>("--ranks", s, 1, 64, "1..64"); });
  cl.add_option("--seq", [&](const std::string& s) { c.seq = parse_integer<int64_t>("--seq", s, 1, 1 << 24, "a length"); });
  cl.add_option("--batch", [&](const std::string& s) { c.batch = parse_integer<int64_t>("--batch", s, 1, 4096, "1..4096"); });
  cl.add_option("--heads", [&](const std::string& s) { c.heads = parse_integer<int64_t>("--heads", s, 1, 4096, "1..4096"); });
  cl.add_option("--kv-heads", [&](const std::string& s) { c.kv_heads = parse_integer<int64_t>("--kv-heads", s, -1, 4096, "1..4096"); });
  cl.add_option("--head-dim", [&](const std::string& s) { c.head_dim = parse_integer<int64_t>("--head-dim", s, 1, 1024, "1..1024"); });
  cl.add_option("--layout", [&](const std::string& s) {
    if (s != "zigzag" && s != "contiguous") throw attn_apps::UsageError("--layout expects zigzag or contiguous, got '" + s + "'");
    c.layout = s == "zigzag" ? dist::SequenceLayout::Zigzag : dist::SequenceLayout::Contiguous;
  });
  cl.add_option("--strategy", [&](const std::string& s) {
    if (s != "ring" && s != "ulysses") throw attn_apps::UsageError("--strategy expects ring or ulysses, got '" + s + "'");
    c.strategy = s == "ring" ? dist::ContextParallelStrategy::Ring : dist::ContextParallelStrategy::Ulysses;
  });
  cl.add_flag("--no-causal", [&] { c.causal = false; });
  cl.add_flag("--causal", [&] { c.causal = true; });
  cl.add_option("--dtype", [&](const std::string& s) {
    if (s != "float32" && s != "float64" && s != "bfloat16")
      throw attn_apps::UsageError("--dtype expects float32, float64 or bfloat16, got '" + s + "'");
    c.dtype_name = s;
    c.dtype = s == "float64" ? torch::kDouble : s == "bfloat16" ? torch::kBFloat16 : torch::kFloat;
  });
  cl.add_option("--threads-per-rank", [&](const std::string& s) { c.threads = parse_integer<int>("--threads-per-rank", s, 1, 1024, "1..1024"); });
  cl.add_option("--repeats", [&](const std::string& s) { c.repeats = parse_integer<int>("--repeats", s, 1, 1000, "1..1000"); });
  cl.add_option("--timeout-s", [&](const std::string& s) { c.timeout_s = parse_integer<int>("--timeout-s", s, 1, 86400, "1..86400"); });
  cl.add_option("--worker", [&](const std::string& s) { worker_rank = parse_integer<int>("--worker", s, -1, 63, "a rank"); });
  cl.add_option("--dir", [&](const std::string& s) { dir = s; });
  cl.parse(argc, argv);
  if (c.kv_heads < 0) c.kv_heads = c.heads;
  if (c.heads % c.kv_heads != 0) throw attn_apps::UsageError("--kv-heads must divide --heads");
  if (c.strategy == dist::ContextParallelStrategy::Ulysses && (c.heads % c.ranks != 0 || c.kv_heads % c.ranks != 0)) {
    throw attn_apps::UsageError(fmt::format("--strategy ulysses needs --ranks ({}) to divide --heads ({}) and the K/V "
                                            "heads ({})", c.ranks, c.heads, c.kv_heads));
  }
  if (worker_rank >= -1) return worker(c, worker_rank, dir);

  handle_stop_signals();
  TemporaryFolder folder;
  dir = folder.path;
  char self_buffer[4096];
  const ssize_t self_length = ::readlink("/proc/self/exe", self_buffer, sizeof self_buffer - 1);
  const std::string self = self_length > 0 ? std::string(self_buffer, static_cast<size_t>(self_length)) : "/proc/self/exe";
  const auto args_for = [&](int rank) {
    std::vector<std::string> a{self, "--worker", std::to_string(rank), "--dir", dir};
    for (const auto& s : config_args(c)) a.push_back(s);
    return a;
  };
  fmt::print("attn-ring: {} on {} ranks, B={} H={} H_kv={} d={} T={} {} {} {}, {} per process, {}\n",
             dist::to_string(c.strategy), c.ranks, c.batch, c.heads, c.kv_heads, c.head_dim, c.seq,
             c.causal ? "causal" : "full", dist::to_string(c.layout), c.dtype_name,
             attn_apps::counted(c.threads, "thread"), attn_apps::counted(c.repeats, "repeat"));
  fmt::print("  ring: starting {} ranks...\n", c.ranks);
  std::fflush(stdout);
  std::vector<std::vector<std::string>> ranks;
  for (int r = 0; r < c.ranks; ++r) ranks.push_back(args_for(r));
  run_all(self, ranks, "ring", folder);
  fmt::print("  single process: running...\n");
  std::fflush(stdout);
  run_all(self, {args_for(-1)}, "single process", folder);

  // Compare, from the files.
  const auto full = [&](const std::string& what, int64_t heads) {
    return load(dir + "/single." + what, {c.batch, heads, c.seq, c.head_dim});
  };
  const auto ring = [&](const std::string& what, int64_t heads) {
    std::vector<torch::Tensor> shards;
    for (int r = 0; r < c.ranks; ++r) {
      const int64_t local = dist::shard_lengths(c.seq, c.ranks, c.layout)[r];
      shards.push_back(load(dir + "/rank" + std::to_string(r) + "." + what, {c.batch, heads, local, c.head_dim}));
    }
    return dist::unshard_sequence(shards, 2, c.layout);
  };
  double worst = 0;
  for (const auto& [what, heads] : std::vector<std::pair<std::string, int64_t>>{
           {"out", c.heads}, {"dq", c.heads}, {"dk", c.kv_heads}, {"dv", c.kv_heads}}) {
    const torch::Tensor expected = full(what, heads);
    worst = std::max(worst, (ring(what, heads) - expected).abs().max().item<double>() /
                                std::max(1.0, expected.abs().max().item<double>()));
  }
  const std::vector<double> single = read_report(dir + "/single.txt");
  double ring_time = 0, ring_rss = 0, bytes = 0, wait = 0, comm = 0, all_wait = 0, fixed = 0;
  for (int r = 0; r < c.ranks; ++r) {
    const std::vector<double> rep = read_report(dir + "/rank" + std::to_string(r) + ".txt");
    ring_time = std::max(ring_time, rep[0]);
    ring_rss = std::max(ring_rss, rep[1]);
    bytes = std::max(bytes, rep[2]);
    wait = std::max(wait, rep[3]);
    comm = std::max(comm, rep[4]);
    all_wait = std::max(all_wait, rep[5]);
    fixed = std::max(fixed, rep[6]);
  }
  end_if_stopped(folder);
  folder.remove();
  // Ulysses's all-to-alls are not overlapped: all of their time is exposed.
  const double hidden = c.strategy == dist::ContextParallelStrategy::Ulysses ? 0.0
                        : comm > 0 ? std::clamp(1.0 - wait / comm, 0.0, 1.0) : 1.0;
  if (c.strategy == dist::ContextParallelStrategy::Ulysses) comm = wait = all_wait;
  fmt::print("\n| | single process | {}, {} ranks |\n|---|---|---|\n", dist::to_string(c.strategy), c.ranks);
  fmt::print("| forward + backward, median | {:.3f} s | {:.3f} s ({:.2f}x) |\n", single[0], ring_time, single[0] / ring_time);
  fmt::print("| peak RSS per process, beyond LibTorch's fixed {:.0f} MiB | {:.0f} MiB | {:.0f} MiB ({:.2f}x) |\n",
             fixed, single[1], ring_rss, ring_rss / single[1]);
  fmt::print("| bytes sent per rank | | {:.1f} MiB |\n", bytes / (1 << 20));
  if (c.strategy == dist::ContextParallelStrategy::Ring) {
    fmt::print("| K/V hops alone / their exposed wait | | {:.3f} s / {:.3f} s: {:.0f}% hidden |\n", comm, wait,
               100 * hidden);
    fmt::print("| all waits, per rank (K/V, dK/dV incl. the peer's compute) | | {:.3f} s |\n", all_wait);
  } else {
    fmt::print("| all-to-alls, per rank (not overlapped: 0% hidden) | | {:.3f} s |\n", all_wait);
  }
  fmt::print("| largest relative difference (output, dq, dk, dv) | | {:.2e} |\n", worst);
  const double tolerance = c.dtype == torch::kDouble ? 1e-10 : c.dtype == torch::kFloat ? 1e-4 : 5e-2;
  TORCH_CHECK(worst <= tolerance, "the ring differs from one process by ", worst, " (more than ", tolerance, ")");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return attn_apps::run_main("attn-ring", kHelp, [&] { return run(argc, argv); });
}
