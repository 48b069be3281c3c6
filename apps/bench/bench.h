#pragma once
// attn-bench's pieces, shared by its source files. Only run_one.cpp and routes.cpp include <torch/torch.h>; the
// rest (suite table, child processes, report) is plain C++, so the app builds quickly.
//
//   configs.cpp  the suites: every configuration in one table, its FLOPs, and when it is skipped
//   run_one.cpp  one configuration: build the inputs, warm up, time the reps, read the peak RSS (and on a GPU
//                the peak of its memory)
//   routes.cpp   --routes: which backend and kernel attn runs for each kind of call on a device
//   child.cpp    the parent's side: fork + exec one child per configuration, read its result line
//   report.cpp   the table, the ratio lines and the JSON file
//   main.cpp     arguments and orchestration

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

namespace bench {

// ---------------------------------------------------------------------------------------------------------
// Configurations (configs.cpp).

enum class Kind {
  Gemm,         // the GEMM ceiling of its dtype
  Core,         // the functional core on q, k, v [B, H, T, d], inference
  Module,       // multi-head attention modules on x [B, T, E] (torch_mha: [T, B, E]), inference
  Training,     // the functional core, forward + backward of out.sum()
  LongContext,  // the fused core at long T, forward only: the point is peak RSS
  Bandwidth,    // the memory-bandwidth ceiling: a streaming read (sum) of kBandwidthBytes
  Decode,       // one decoding step: Tq = 1 query per head against a KV cache of Tk positions
  Linear,       // a decoding step's product: x [Tq, d] times a weight [Tk, d] (impl attn_linear | at_linear)
  Variant,      // the fused core with a window, a score term, or packed sequences (impl fused | packed | padded)
};

struct Config {
  std::string name;  // unique; what --filter matches and --run-one names, e.g. "core/fused/T=4096/causal"
  Kind kind = Kind::Core;
  std::string impl;  // gemm | fused | math | torch_sdpa | attn_mha | attn_mha_math | torch_mha
                     // (torch_sdpa: LibTorch's scaled_dot_product_attention, on 2.x its fused CPU flash kernel)
  // Attention: batch, heads, query and key lengths, head width. Gemm: a [Tq, d] x [d, Tk] product.
  int64_t B = 1, H = 1, Tq = 0, Tk = 0, d = 0;
  int64_t Hkv = 0;  // key/value heads (grouped-query attention); 0 means H
  bool causal = false;
  std::string dtype = "float32";  // of the inputs (and module): float32 or bfloat16; a GEMM ceiling is of its own dtype
  // Variants: a causal sliding window of this many keys (window(window - 1, 0)), -1 for none; one score term
  // ("softcap", "alibi", "sinks" or ""); and the sequence lengths of a ragged batch (packed or padded).
  int64_t window = -1;
  std::string term;
  std::vector<int64_t> lengths;
  // Decode: how the cache is kept, "" for a contiguous cache in the query's dtype, "int8" for a KVCache of int8
  // rows with a scale per row, "pagedN" for a PagedKVCache of blocks of N positions ("-interleaved" and
  // "-scattered": see CacheForm), "int8-pagedN" for one of int8 rows.
  std::string cache;
  // Linear: the out features of weights that share x (a layer's q, k and v), multiplied by one call or one each;
  // empty for a single weight of Tk out features.
  std::vector<int64_t> outs;
  // Caps on the suite's warm-up runs and reps, for the configurations that take many seconds (-1: none).
  int max_warmup = -1, max_reps = -1;
  // A configuration of the GPU suite: attention runs blockwise there whatever the implementation, so no row is
  // skipped for the size of its scores; the bandwidth ceiling reads this many GiB.
  bool gpu = false;
  int64_t bandwidth_gib = 1;
};

/// A decode row's cache form, read from Config::cache in one place: int8 rows with a scale each or the query's
/// dtype, contiguous (block_size 0) or paged in blocks of block_size positions, placed as below.
struct CacheForm {
  enum class Placement {
    InOrder,      // each sequence written alone: its blocks follow each other
    Interleaved,  // twice the sequences, growing a block at a time in turn, in the cache's default runs
    Scattered,    // the same with run_positions(1): each read sequence's consecutive blocks lie 2B apart
  };
  bool int8 = false;
  int64_t block_size = 0;
  Placement placement = Placement::InOrder;
  bool paged() const { return block_size > 0; }
};
/// Config::cache parsed; throws std::invalid_argument naming a form it does not know.
CacheForm cache_form(const Config& config);

struct Suite {
  std::string name;
  int warmup = 0, reps = 0;  // defaults; --warmup and --reps override them
  std::vector<Config> configs;  // in the order they run; the GEMM ceiling first
};

extern const double kMaxScoreBytes;  // larger [B, H, Tq, Tk] scores are skipped (~6 GiB)

/// Query-key pairs a variant configuration attends (for its FLOPs): causal, within its window, per sequence.
double attended_pairs(const Config& config);

/// The named suite ("quick" or "full"); std::nullopt for another name.
std::optional<Suite> make_suite(const std::string& name);
/// The suite names, for --help and error messages.
std::vector<std::string> suite_names();
/// The configuration of that name in any suite (the child looks its configuration up by name).
std::optional<Config> find_config(const std::string& name);

/// FLOPs of one call, by design.md's "Measuring" conventions.
double flops(const Config& config);
/// Bytes one call must read from memory: the K/V cache of a decode step, the buffer of the bandwidth
/// ceiling; 0 for the compute-bound kinds.
double bytes_read(const Config& config);
/// Key/value heads of an attention configuration (Hkv, or H when 0).
inline int64_t kv_heads(const Config& c) { return c.Hkv > 0 ? c.Hkv : c.H; }
extern const double kBandwidthBytes;
/// Why the configuration is not run on `device` (its scores or cache would not fit; the bfloat16 GEMM ceiling
/// where LibTorch has no bfloat16 GEMM for the CPU), or std::nullopt.
std::optional<std::string> skip_reason(const Config& config, const std::string& device);

// ---------------------------------------------------------------------------------------------------------
// One configuration, measured in the child process (run_one.cpp).

struct RunSettings {
  int warmup = 0, reps = 1;
  int threads = 0;  // 0: LibTorch's default
  std::string device = "cpu";
};

struct Measurement {
  double ms_median = 0;
  double peak_device_mib = std::numeric_limits<double>::quiet_NaN();  // on a GPU: its allocator's peak in the reps
  double peak_rss_mib = 0;  // VmHWM at the end: the process's peak, libtorch included
  double base_rss_mib = 0;  // VmHWM before any input exists: what loading libtorch costs
  int threads = 0;          // at::get_num_threads() in the child
  // --alternate: the peer timed in the same process, its reps alternating with these (run_config_alternated)
  std::string alternated_with;  // the peer configuration's name; empty when timed alone
  double peer_ms_median = std::numeric_limits<double>::quiet_NaN();
  double alternated_speedup = std::numeric_limits<double>::quiet_NaN();  // median over reps of peer ms / ours
};

/// Runs `config` warmup + reps times and measures it. Throws std::exception on failure.
Measurement run_config(const Config& config, const RunSettings& settings);
/// Runs `config` and `peer` in turn, a warm-up and a rep of one, then of the other, and measures both: a
/// machine whose speed drifts from minute to minute moves both alike, and each rep's ratio is taken against
/// its neighbour. The peak RSS is the process's, both workloads' inputs together. CPU only.
Measurement run_config_alternated(const Config& config, const Config& peer, const RunSettings& settings);
/// Whether two configurations measure the same shape (every size, causality, dtype, lengths, cache form and
/// weights), whatever their implementations.
bool same_shape(const Config& a, const Config& b);
/// The implementations --alternate times beside one of attn's in the same process: LibTorch's own.
bool is_alternation_peer(const std::string& impl);
/// Checks that `spec` names a usable device; returns its canonical name ("cpu", "cuda:0"). Throws if not.
std::string check_device(const std::string& spec);
/// The GPU's name ("NVIDIA H100 80GB HBM3"), or "" for the CPU.
std::string device_name(const std::string& device);

// ---------------------------------------------------------------------------------------------------------
// --routes (routes.cpp).

/// Prints, for each kind of call (dtypes, masks, GQA, the variants, packed sequences, the KV cache) on `device`,
/// the route attn takes for inference and for training (attn::describe_route), and writes them as JSON to
/// `json_path` unless it is empty.
void print_routes(const std::string& device, const std::string& json_path);

// ---------------------------------------------------------------------------------------------------------
// Child processes (child.cpp).

/// The one line a child prints on stdout; parse_result_line reads it back (std::nullopt if malformed).
std::string format_result_line(const Measurement& m);
std::optional<Measurement> parse_result_line(const std::string& stdout_text);

struct ChildOutcome {
  std::optional<Measurement> measurement;  // set when the child succeeded
  std::string error;                       // otherwise: why, with the tail of its stderr
};

/// Runs this executable again (/proc/self/exe, never a bare fork: LibTorch's OpenMP pool does not survive
/// fork) with `args`, and collects its result line.
ChildOutcome run_child(const std::string& argv0, const std::vector<std::string>& args);

// ---------------------------------------------------------------------------------------------------------
// Results (report.cpp).

struct Record {
  Config config;
  std::optional<Measurement> measurement;
  std::string error;    // the configuration failed
  std::string skipped;  // the configuration was not run, and why
  double gflops() const;
  double pct_of(double ceiling_gflops) const;  // NaN when unknown
  double gbps() const;                         // bytes_read / time, NaN for compute-bound kinds
};

/// GB/s of the bandwidth ceiling record, NaN if it did not run.
double bandwidth_gbps(const std::vector<Record>& records);

/// The GEMM ceilings of this run (GFLOP/s of a 2048³ torch::mm in each dtype), NaN where not run. Each
/// record's "% GEMM" is relative to the ceiling of its own dtype.
struct Ceilings {
  double float32 = std::numeric_limits<double>::quiet_NaN();
  double bfloat16 = std::numeric_limits<double>::quiet_NaN();
  /// The bfloat16 ceiling was not run (skip_reason): bfloat16 rows are relative to the float32 one, the GEMM attn
  /// widens bfloat16 to on such a CPU.
  bool bfloat16_on_float32 = false;
  /// The dtype of the ceiling that rows of `dtype` are relative to.
  std::string dtype_of(const std::string& dtype) const {
    return dtype == "bfloat16" && !bfloat16_on_float32 ? "bfloat16" : "float32";
  }
  double of(const std::string& dtype) const { return dtype_of(dtype) == "bfloat16" ? bfloat16 : float32; }
  /// Takes a GEMM record's result, if r is one.
  void take(const Record& r);
};
/// The results table, on stdout.
void print_table(const std::vector<Record>& records, const Ceilings& ceilings);
/// The comparisons within this run: fused vs its peers, attn_mha vs torch_mha, causal vs not, training memory.
void print_ratios(const std::vector<Record>& records, const Ceilings& ceilings);
/// A JSON list with one object per record that ran or failed (skipped ones are left out); on the CPU each names
/// the kernel routes (cpu_kernel: attn::cpu_kernel_info().summary; left out on a GPU).
std::string to_json(const std::vector<Record>& records, const Ceilings& ceilings, const std::string& device,
                    const std::string& cpu_kernel);

// --- blas_info.cpp ---
/// Which BLAS LibTorch's matrix products run on, e.g. "OpenBLAS 0.3.21 (openmp), kernels SkylakeX"; plus a
/// warning when OpenBLAS runs generic kernels on a CPU with AVX2 (empty when all is well).
struct BlasInfo {
  std::string description;
  std::string warning;
};
BlasInfo blas_info();

}  // namespace bench
