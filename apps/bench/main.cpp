// attn-bench: times attn's attention (fused and math backends, MultiHeadAttention) against LibTorch's own
// (SDPA, torch::nn::MultiheadAttention) in one run, relative to a GEMM ceiling measured in the same run,
// and measures each configuration's peak memory by running it in a child process of its own.
//
// This file parses the arguments and runs the suite; bench.h says where the rest lives.

#include "bench.h"

#include "app_main.h"
#include "command_line.h"

#include <attn/cpu_kernel_info.h>
#include <attn/device.h>
#include <attn/io/files.h>

#include <fmt/core.h>
#include <fmt/format.h>

#include <c10/util/Exception.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace {

using attn_apps::parse_integer;
using attn_apps::UsageError;

constexpr int kMaxCount = 1000000;

struct BenchOptions {
  std::string suite = "quick";
  std::string filter;
  std::string json_path;  // empty: no JSON
  std::string device = "cpu";
  int reps = -1, warmup = -1;  // -1: the suite's default
  // Every core by default: LibTorch's own default can be lower (1 on the 2-vCPU reference VM), and every
  // implementation in a run gets the same count either way.
  int threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  bool list = false;
  bool routes = false;
  bool alternate = false;
  std::string run_one;         // hidden: measure this one configuration and print its result line (the child)
  std::string alternate_with;  // hidden, with run_one: and this peer, their reps in turn
};

/// The route settings, one a line, from the library's own table.
std::string environment_settings_help() {
  std::string lines;
  for (const attn::EnvironmentSetting& setting : attn::environment_settings()) {
    std::string choices;
    for (const std::string& choice : setting.choices) choices += (choices.empty() ? "" : "|") + choice;
    const std::string assignment = setting.name + "=" + choices;
    // The meaning in the column after the longest short assignment, or on a line of its own.
    if (assignment.size() < 35) {
      lines += fmt::format("  {:<35}{}\n", assignment, setting.meaning);
    } else {
      lines += fmt::format("  {}\n  {:<35}{}\n", assignment, "", setting.meaning);
    }
  }
  return lines;
}

std::string usage() {
  std::string suites;
  for (const std::string& name : bench::suite_names()) {
    const bench::Suite suite = *bench::make_suite(name);
    suites += fmt::format("                    {:<8} {} configurations, warm-up {}, reps {}\n", name,
                          suite.configs.size(), suite.warmup, suite.reps);
  }
  return fmt::format(R"(Usage: attn-bench [OPTIONS]

Times attn's attention (fused and math backends, MultiHeadAttention) against LibTorch's own (SDPA,
torch::nn::MultiheadAttention) in one run. Each configuration runs in a child process of its own, which
reports the median of its timed runs and its peak RSS. Progress goes to stderr; the table and the in-run
ratios to stdout.

FLOPs follow FlashAttention's benchmarks: attention 4·B·H·Tq·Tk·d forward, half if causal, backward 2.5×
forward, plus 2·T·d_in·d_out per projection. "% GEMM" is relative to a 2048³ torch::mm of the row's dtype
(float32, or bfloat16 where the suite has bfloat16 rows) measured first in the same run; on x86 without
AVX-512, where attn widens bfloat16 to float and LibTorch's bfloat16 GEMM runs reference loops, bfloat16 rows
are relative to the float32 one. The decode suite
is bound by memory instead: "GB/s" is the K/V cache (or, for linear rows, the weight) read per step, and
"% BW" is relative to a streaming read (sum over 1 GiB) measured first in the same run.

Options:
  --suite NAME      which configurations to run (default: quick):
{}  --filter SUBSTR   run only the configurations whose name contains SUBSTR; the GEMM ceiling always runs
  --list            print the names of the configurations that would run, and exit
  --reps N          timed runs per configuration, of which the median is reported (default: the suite's)
  --warmup N        untimed runs before them (default: the suite's)
  --threads N       at::set_num_threads(N) in every configuration (default: every core)
  --device DEV      cpu | cuda | cuda:N (default: cpu)
  --json FILE       also write the records to FILE as a JSON list (written to a temporary file, then renamed)
  --alternate       time each of attn's configurations and its LibTorch peer (torch_sdpa, torch_mha,
                    at_linear) in one child process, a rep of one, then of the other, and report beside each
                    ratio of medians the median of the reps' own ratios: on a machine whose speed drifts
                    between processes (a shared VM), the steadier comparison. Peak RSS is then the pair's
                    together
  --routes          time nothing: print which backend and kernel attn runs for each kind of call (dtypes,
                    masks, GQA, window, softcap, ALiBi, sinks, packed sequences, the KV cache) on --device,
                    for inference and for training; --json writes them
  -h, --help        show this help and exit

Values may also be given as --option=VALUE. Long-context configurations run without warm-up and with at
most 1 (quick) or 2 (full) reps. Implementations that hold the [B,H,Tq,Tk] scores are skipped where those
would exceed {:.0f} GiB.

On a GPU (--device cuda) every configuration runs in this process, one after the other; a rep is as many calls
as fill 5 ms, and "peak MiB" is the GPU allocator's peak during the reps (inputs included) instead of RSS. The
gpu suite is made for it: bfloat16 attention at FlashAttention's benchmark shapes against LibTorch's SDPA,
MultiHeadAttention against at::linear + SDPA and torch::nn::MultiheadAttention, decode steps against a 4 GiB
read, and the variants against plain causal attention.

Names: gemm/2048, core/IMPL/T=N/causal, core/IMPL/T=N/noncausal, mha/IMPL/T=N, train/IMPL/T=N (full and peer:
train/IMPL/T=N/causal and /noncausal), long/fused/T=N; decode: bandwidth/sum-1GiB, decode/IMPL/B=N/Hkv=N/L=N
(one step of 32 query heads of 128 over a cache of L positions; IMPL decode, math, torch_sdpa),
linear/IMPL/rows=N/OUTxIN (a decoding step's product, or at rows=128 and 512 a prefill's: x [rows, IN] times a
weight [OUT, IN]; IMPL attn_linear or at_linear), linear/IMPL/rows=1/576+192+192x576 (a layer's q, k and v
projections of one row, on copies of the weights that come from memory; IMPL attn_linear_many, one call, or
attn_linear_each), prefill/fused/T=2048/Hkv=N; a bfloat16 row ends in /bfloat16, and a
bfloat16 decode step over an int8 cache in /int8-cache, or a paged cache in blocks of 16: each sequence's
blocks in order in /paged16-cache, taken in turn by a batch growing together in /paged16-interleaved-cache (in
the cache's runs of adjacent blocks) and /paged16-scattered-cache (a block at a time), and scattered in blocks
of 128 in /paged128-scattered-cache; a paged int8 cache the same ways, /int8-paged16-cache and so on (each
reported beside the contiguous bfloat16 cache, an int8 one also beside the contiguous int8 cache). torch_sdpa
is LibTorch's scaled_dot_product_attention (on LibTorch 2.x its fused CPU flash kernel). Examples:
  attn-bench --json bench.json
  attn-bench --suite peer                  # ours against LibTorch's SDPA, float32 and bfloat16
  attn-bench --suite full --filter core/fused/ --reps 5
  attn-bench --suite decode --filter L=8192  # decode steps against an 8k cache, with the bandwidth ceiling
  attn-bench --suite decode --filter linear/  # a decoding step's products: attn::linear against at::linear
  attn-bench --suite variants              # sliding window, softcap, ALiBi, sinks, packed vs padded batches
  attn-bench --filter /causal              # only the causal configurations
  attn-bench --suite gpu --device cuda     # the GPU tables
  attn-bench --routes --device cuda        # what runs where

The CPU kernel's routes (named on stderr at the start, on stdout after the table and in --json's "cpu_kernel") can be
forced for a comparison, e.g. ATTN_AMX=off attn-bench --suite peer --filter bfloat16:
{}A value outside these is ignored, with a warning that names the choices (docs/backends.md, docs/decoding.md).

Exit status: 0 when the run completed (a configuration that failed is a row with an error, not a failed
run), 1 when it could not run or write --json, 2 for bad usage.
)",
                     suites, bench::kMaxScoreBytes / (1 << 30), environment_settings_help());
}

BenchOptions parse_args(int argc, char** argv) {
  BenchOptions options;
  attn_apps::CommandLine command_line;
  const auto add_count = [&](const std::string& name, int& field, int min, int max) {
    command_line.add_option(name, [&field, name, min, max](const std::string& value) {
      field = parse_integer<int>(name, value, min, max, fmt::format("an integer in {}..{}", min, max));
    });
  };
  command_line.add_option("--suite", [&](const std::string& value) {
    if (!bench::make_suite(value))
      throw UsageError(
          fmt::format("unknown suite '{}'; choose one of: {}", value, fmt::join(bench::suite_names(), ", ")));
    options.suite = value;
  });
  command_line.add_option("--filter", [&](const std::string& value) { options.filter = value; });
  add_count("--reps", options.reps, 1, kMaxCount);
  add_count("--warmup", options.warmup, 0, kMaxCount);
  add_count("--threads", options.threads, 1, 4096);
  command_line.add_option("--device", [&](const std::string& value) {
    if (value != "cpu" && value.rfind("cuda", 0) != 0)
      throw UsageError(fmt::format("--device expects cpu, cuda or cuda:N, got '{}'", value));
    try {
      bench::check_device(value);  // whether the device is there: a usage error, as in attn-demo
    } catch (const c10::Error& e) {
      throw UsageError(fmt::format("--device {}: {}", value, e.what_without_backtrace()));
    }
    options.device = value;
  });
  command_line.add_output_file_option("--json", options.json_path);
  command_line.add_flag("--list", [&] { options.list = true; });
  command_line.add_flag("--routes", [&] { options.routes = true; });
  command_line.add_flag("--alternate", [&] { options.alternate = true; });
  command_line.add_option("--run-one", [&](const std::string& value) { options.run_one = value; });
  command_line.add_option("--alternate-with", [&](const std::string& value) { options.alternate_with = value; });
  command_line.parse(argc, argv);
  return options;
}

// The child: one configuration, whose result line goes to stdout for the parent to read.
int run_one(const BenchOptions& options) {
  const auto config = bench::find_config(options.run_one);
  if (!config) throw UsageError(fmt::format("no configuration named '{}'", options.run_one));
  bench::RunSettings settings;
  settings.warmup = std::max(options.warmup, 0);
  settings.reps = std::max(options.reps, 1);
  settings.threads = options.threads;
  settings.device = options.device;
  if (options.alternate_with.empty()) {
    fmt::print("{}", bench::format_result_line(bench::run_config(*config, settings)));
    return 0;
  }
  const auto peer = bench::find_config(options.alternate_with);
  if (!peer) throw UsageError(fmt::format("no configuration named '{}'", options.alternate_with));
  fmt::print("{}", bench::format_result_line(bench::run_config_alternated(*config, *peer, settings)));
  return 0;
}

// With --alternate: for each peer configuration (LibTorch's), the first of attn's configurations selected
// with the same shape; -1 where it has none.
std::vector<int> alternation_partners(const std::vector<bench::Config>& selected) {
  std::vector<int> partner(selected.size(), -1);
  for (size_t p = 0; p < selected.size(); ++p) {
    if (!bench::is_alternation_peer(selected[p].impl)) continue;
    // attn's default route first (the fused kernel, MultiHeadAttention, attn::linear), then any other of attn's.
    for (const bool preferred_only : {true, false}) {
      for (size_t o = 0; o < selected.size() && partner[p] < 0; ++o) {
        const bench::Config& c = selected[o];
        const bool preferred = c.impl == "fused" || c.impl == "auto" || c.impl == "attn_mha" || c.impl == "attn_linear";
        if (partner[o] < 0 && !bench::is_alternation_peer(c.impl) && bench::same_shape(c, selected[p]) &&
            (preferred || !preferred_only)) {
          partner[o] = static_cast<int>(p);
          partner[p] = static_cast<int>(o);
        }
      }
    }
  }
  return partner;
}

// What to do with the suite's warm-up and rep counts for one configuration: the caps of long runs win.
int capped(int value, int cap) { return cap >= 0 ? std::min(value, cap) : value; }

std::string progress_result(const bench::Record& r, double ceiling) {
  if (!r.skipped.empty()) return "skipped: " + r.skipped;
  if (!r.measurement) return "ERROR: " + r.error;
  std::string text = fmt::format("{:.1f} ms  {:.1f} GFLOP/s", r.measurement->ms_median, r.gflops());
  if (r.config.kind != bench::Kind::Gemm && std::isfinite(r.pct_of(ceiling)))
    text += fmt::format(" ({:.1f}% of GEMM)", r.pct_of(ceiling));
  if (std::isfinite(r.measurement->peak_device_mib))
    return text + fmt::format("  GPU peak {:.0f} MiB", r.measurement->peak_device_mib);
  return text + fmt::format("  peak {:.0f} MiB", r.measurement->peak_rss_mib);
}

// The parent: every selected configuration in a child process, then the report.
int run_suite(const BenchOptions& options, const char* argv0) {
  const bench::Suite suite = *bench::make_suite(options.suite);
  std::vector<bench::Config> selected;
  bool matched = false;
  for (const bench::Config& c : suite.configs) {
    const bool match = c.name.find(options.filter) != std::string::npos;
    matched |= match;
    // The ceilings always run: every other record's pct_gemm_ceiling (and % BW) is relative to them.
    if (match || c.kind == bench::Kind::Gemm || c.kind == bench::Kind::Bandwidth) selected.push_back(c);
  }
  if (!matched)
    throw UsageError(fmt::format("--filter '{}' matches no configuration of suite {} (see --list)", options.filter,
                                 suite.name));
  if (options.list) {
    for (const bench::Config& c : selected) fmt::print("{}\n", c.name);
    return 0;
  }

  const std::string device = bench::check_device(options.device);
  const int warmup = options.warmup >= 0 ? options.warmup : suite.warmup;
  const int reps = options.reps >= 0 ? options.reps : suite.reps;
  fmt::print(stderr, "attn-bench: suite {}, {} configurations, warm-up {}, reps {}, device {}, threads {}\n",
             suite.name, selected.size(), warmup, reps, device,
             options.threads > 0 ? std::to_string(options.threads) : "default");
  const bench::BlasInfo blas = bench::blas_info();
  fmt::print(stderr, "attn-bench: BLAS: {}\n", blas.description);
  if (!blas.warning.empty()) fmt::print(stderr, "attn-bench: warning: {}\n", blas.warning);
  if (device == "cpu") fmt::print(stderr, "attn-bench: CPU kernel: {}\n", attn::cpu_kernel_info().summary);

  const bool in_process = device != "cpu";
  if (in_process) fmt::print(stderr, "attn-bench: GPU: {}; every configuration runs in this process\n", bench::device_name(device));

  if (options.alternate && in_process) throw UsageError("--alternate times CPU configurations only (--device cpu)");
  const std::vector<int> partner =
      options.alternate ? alternation_partners(selected) : std::vector<int>(selected.size(), -1);

  const auto start = std::chrono::steady_clock::now();
  std::vector<bench::Record> records;
  // A peer's record, made when its partner ran earlier in the list (--alternate).
  std::vector<std::optional<bench::Record>> measured_with_partner(selected.size());
  bench::Ceilings ceilings;
  for (size_t i = 0; i < selected.size(); ++i) {
    bench::Record record{selected[i], std::nullopt, "", ""};
    const bench::Config& c = record.config;
    fmt::print(stderr, "[{}/{}] {} ... ", i + 1, selected.size(), c.name);
    const int p = partner[i];
    if (measured_with_partner[i]) {
      record = *measured_with_partner[i];
    } else if (const auto reason = bench::skip_reason(c, device)) {
      record.skipped = *reason;
    } else if (in_process) {
      bench::RunSettings settings;
      settings.warmup = capped(warmup, c.max_warmup);
      settings.reps = std::max(capped(reps, c.max_reps), 1);
      settings.threads = options.threads;
      settings.device = device;
      try {
        record.measurement = bench::run_config(c, settings);
      } catch (const std::exception& error) {
        record.error = error.what();
      }
    } else {
      std::vector<std::string> args{"--run-one", c.name, "--warmup", std::to_string(capped(warmup, c.max_warmup)),
                                    "--reps", std::to_string(capped(reps, c.max_reps)), "--device", device};
      if (options.threads > 0) args.insert(args.end(), {"--threads", std::to_string(options.threads)});
      // The pair runs when the first of the two comes up; the other's record waits for its turn in the list.
      const bool pair = p >= 0 && !bench::skip_reason(selected[p], device);
      if (pair) args.insert(args.end(), {"--alternate-with", selected[p].name});
      bench::ChildOutcome outcome = bench::run_child(argv0, args);
      record.measurement = outcome.measurement;
      record.error = outcome.error;
      if (pair) {
        bench::Record other{selected[p], std::nullopt, outcome.error, ""};
        if (outcome.measurement) {
          // The child timed selected[i] first in its names and selected[p] beside it; each record gets its
          // own time, and its ratio the other way round.
          bench::Measurement theirs = *outcome.measurement;
          theirs.ms_median = outcome.measurement->peer_ms_median;
          theirs.peer_ms_median = outcome.measurement->ms_median;
          theirs.alternated_with = c.name;
          theirs.alternated_speedup = 1.0 / outcome.measurement->alternated_speedup;
          other.measurement = theirs;
        }
        measured_with_partner[p] = other;
      }
    }
    ceilings.take(record);
    fmt::print(stderr, "{}\n", progress_result(record, ceilings.of(c.dtype)));
    records.push_back(std::move(record));
  }

  bench::print_table(records, ceilings);
  bench::print_ratios(records, ceilings);
  if (device == "cpu") fmt::print("  CPU kernel: {}\n", attn::cpu_kernel_info().summary);

  int failed = 0, skipped = 0;
  for (const auto& r : records) failed += !r.error.empty(), skipped += !r.skipped.empty();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::fflush(stdout);  // the table whole before the summary on stderr, where both go to one pipe
  fmt::print(stderr, "attn-bench: {} configurations in {:.0f} s: {} failed, {} skipped\n", records.size(), seconds,
             failed, skipped);
  if (!options.json_path.empty()) {
    attn::io::write_file_atomically(options.json_path, bench::to_json(records, ceilings, device,
                                                                device == "cpu" ? attn::cpu_kernel_info().summary : ""));
    fmt::print(stderr, "attn-bench: wrote {}\n", options.json_path);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return attn_apps::run_main("attn-bench", usage(), [&] {
    const auto options = parse_args(argc, argv);
    if (options.routes) {
      bench::print_routes(bench::check_device(options.device), options.json_path);
      return 0;
    }
    return options.run_one.empty() ? run_suite(options, argv[0]) : run_one(options);
  });
}
