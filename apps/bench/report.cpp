// The results: a table and the in-run ratios on stdout, and the JSON file.

#include "bench.h"

#include <fmt/core.h>
#include <fmt/format.h>

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <stdexcept>

namespace bench {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr size_t kNoteWidth = 100;  // a longer error is cut in the table (the JSON keeps all of it)

// The record that measured (kind, impl, T, causal, dtype), or nullptr if it did not run or failed.
const Record* find(const std::vector<Record>& records, Kind kind, const std::string& impl, int64_t T,
                   bool causal = false, const std::string& dtype = "float32") {
  for (const Record& r : records)
    if (r.config.kind == kind && r.config.impl == impl && r.config.Tq == T && r.config.causal == causal &&
        r.config.dtype == dtype)
      return r.measurement ? &r : nullptr;
  return nullptr;
}

// The record that measured configuration c's shape (every size, causality and dtype) with `impl`, or nullptr.
const Record* find_peer(const std::vector<Record>& records, const Config& c, const std::string& impl) {
  for (const Record& r : records) {
    if (r.config.impl == impl && same_shape(r.config, c)) return r.measurement ? &r : nullptr;
  }
  return nullptr;
}

// " bfloat16" after a row's description; nothing for float32, the default.
std::string dtype_suffix(const Config& c) { return c.dtype == "float32" ? "" : " " + c.dtype; }

// "2.31x" faster (peer time / our time), or "n/a" when either side has no time. Where --alternate timed the two
// in one process, the median of the reps' own ratios follows: "2.31x (alternated 2.25x)".
std::string speedup(const Record* ours, const Record* peer) {
  if (!ours || !peer) return "n/a";
  const std::string ratio = fmt::format("{:.2f}x", peer->measurement->ms_median / ours->measurement->ms_median);
  if (ours->measurement->alternated_with != peer->config.name) return ratio;
  return fmt::format("{} (alternated {:.2f}x)", ratio, ours->measurement->alternated_speedup);
}

std::string number_or_dash(double value, const char* spec) {
  return std::isfinite(value) ? fmt::format(fmt::runtime(spec), value) : "-";
}

// JSON: a finite number, or null.
std::string json_number(double value) { return std::isfinite(value) ? fmt::format("{:.6g}", value) : "null"; }

std::string json_string(const std::string& text) {
  std::string out = "\"";
  for (const char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20) out += fmt::format("\\u{:04x}", c);  // other control characters
        else out += ch;                                      // UTF-8 passes through unchanged
    }
  }
  return out + "\"";
}

// The GPU suite's comparisons: the core against LibTorch's SDPA and the bfloat16 ceiling, MultiHeadAttention
// against the same composition of at::linear and SDPA, each variant's time and GPU memory against plain causal
// attention at its T, and a ragged batch packed against padded.
void print_gpu_ratios(const std::vector<Record>& records, const Ceilings& ceilings) {
  const auto by_name = [&](const std::string& name) -> const Record* {
    for (const Record& r : records)
      if (r.config.name == name && r.measurement) return &r;
    return nullptr;
  };
  const auto memory = [](const Record* r) { return r ? r->measurement->peak_device_mib : kNaN; };
  for (const Record& r : records) {
    const Config& c = r.config;
    if (!c.gpu || !r.measurement) continue;
    if (c.kind == Kind::Core && c.impl == "auto") {
      const Record* sdpa = find_peer(records, c, "torch_sdpa");
      fmt::print("  gpu core d={} T={} {}: attn {:.3f} ms, {:.0f}% of the bfloat16 GEMM ceiling; vs torch_sdpa {}\n",
                 c.d, c.Tq, c.causal ? "causal" : "noncausal", r.measurement->ms_median, r.pct_of(ceilings.bfloat16),
                 speedup(&r, sdpa));
    } else if (c.kind == Kind::Module && c.impl == "attn_mha") {
      const Record* composed = find_peer(records, c, "sdpa_linear");
      const Record* torch_mha = find_peer(records, c, "torch_mha");
      fmt::print("  gpu mha T={}: attn_mha {:.3f} ms, {} over at::linear + SDPA (target <= +5%); vs torch_mha {}\n",
                 c.Tq, r.measurement->ms_median,
                 composed ? fmt::format("{:+.1f}%", (r.measurement->ms_median / composed->measurement->ms_median - 1) * 100)
                          : "n/a",
                 speedup(&r, torch_mha));
    } else if (c.kind == Kind::Variant && c.impl == "auto" && (c.window > 0 || !c.term.empty())) {
      const Record* plain = by_name(fmt::format("gpu-variants/auto/T={}/causal", c.Tq));
      if (!plain) continue;
      fmt::print("  gpu variants T={} causal {}: {:.2f}x the time of plain causal (target <= 1.5x), {:.2f}x its GPU "
                 "memory (target <= 1.2x)\n",
                 c.Tq, c.window > 0 ? fmt::format("window={}", c.window) : c.term,
                 r.measurement->ms_median / plain->measurement->ms_median, memory(&r) / memory(plain));
    } else if (c.kind == Kind::Variant && c.impl == "packed") {
      const Record* padded = find_peer(records, c, "padded");
      fmt::print("  gpu varlen {} sequences causal: packed vs padded {}, GPU memory {:.0f} vs {:.0f} MiB\n",
                 c.lengths.size(), speedup(&r, padded), memory(&r), memory(padded));
    }
  }
}

}  // namespace

double Record::gflops() const {
  if (!measurement || measurement->ms_median <= 0) return kNaN;
  return flops(config) / (measurement->ms_median * 1e-3) / 1e9;
}

double Record::pct_of(double ceiling) const { return gflops() / ceiling * 100; }

double Record::gbps() const {
  const double bytes = bytes_read(config);
  if (!measurement || measurement->ms_median <= 0 || bytes <= 0) return kNaN;
  return bytes / (measurement->ms_median * 1e-3) / 1e9;
}

double bandwidth_gbps(const std::vector<Record>& records) {
  for (const Record& r : records)
    if (r.config.kind == Kind::Bandwidth) return r.gbps();
  return kNaN;
}

void Ceilings::take(const Record& r) {
  if (r.config.kind != Kind::Gemm) return;
  if (r.config.dtype == "bfloat16" && !r.skipped.empty()) bfloat16_on_float32 = true;
  (r.config.dtype == "bfloat16" ? bfloat16 : float32) = r.gflops();
}

void print_table(const std::vector<Record>& records, const Ceilings& ceilings) {
  size_t width = 4;
  for (const Record& r : records) width = std::max(width, r.config.name.size());
  // Memory-bound rows (the bandwidth ceiling, decode steps) add GB/s and their share of the bandwidth ceiling.
  bool memory_bound = false;
  for (const Record& r : records) memory_bound = memory_bound || bytes_read(r.config) > 0;
  const double bandwidth = bandwidth_gbps(records);
  fmt::print("{:<{}}  {:>10}  {:>8}  {:>7}  {:>9}", "name", width, "ms", "GFLOP/s", "% GEMM", "peak MiB");
  if (memory_bound) fmt::print("  {:>7}  {:>5}", "GB/s", "% BW");
  fmt::print("  note\n");
  for (const Record& r : records) {
    std::string note = !r.error.empty() ? "error: " + r.error : !r.skipped.empty() ? "skipped: " + r.skipped : "";
    if (note.size() > kNoteWidth) note = note.substr(0, kNoteWidth - 3) + "...";
    const double ms = r.measurement ? r.measurement->ms_median : kNaN;
    // On a GPU the allocator's peak during the reps; on the CPU the process's peak RSS.
    const double rss = !r.measurement                                  ? kNaN
                       : std::isfinite(r.measurement->peak_device_mib) ? r.measurement->peak_device_mib
                                                                       : r.measurement->peak_rss_mib;
    const Kind kind = r.config.kind;
    const bool compute = bytes_read(r.config) <= 0 || kind == Kind::Decode || kind == Kind::Linear;
    fmt::print("{:<{}}  {:>10}  {:>8}  {:>7}  {:>9}", r.config.name, width, number_or_dash(ms, "{:.2f}"),
               number_or_dash(compute ? r.gflops() : kNaN, "{:.1f}"),
               number_or_dash(compute ? r.pct_of(ceilings.of(r.config.dtype)) : kNaN, "{:.1f}"),
               number_or_dash(rss, "{:.0f}"));
    if (memory_bound) {
      fmt::print("  {:>7}  {:>5}", number_or_dash(r.gbps(), "{:.1f}"),
                 number_or_dash(r.gbps() / bandwidth * 100, "{:.0f}"));
    }
    fmt::print("  {}\n", note);
  }
}

void print_ratios(const std::vector<Record>& records, const Ceilings& ceilings) {
  fmt::print("\nIn this run (speedup = peer ms / ours ms; > 1 means ours is faster):\n");
  for (const Record& r : records) {
    const Config& c = r.config;
    if (c.kind != Kind::Gemm) continue;
    const char* dtype = c.dtype == "float32" ? "fp32" : c.dtype.c_str();
    if (!r.skipped.empty()) fmt::print("  GEMM ceiling ({}³ {} torch::mm): not run: {}\n", c.Tq, dtype, r.skipped);
    if (!r.measurement) continue;
    fmt::print("  GEMM ceiling ({}³ {} torch::mm): {:.1f} GFLOP/s", c.Tq, dtype, r.gflops());
    if (c.dtype == "bfloat16" && std::isfinite(ceilings.float32)) {
      fmt::print(", {:.2f}x the fp32 one", ceilings.bfloat16 / ceilings.float32);
    }
    fmt::print("{}\n", c.dtype == "bfloat16" ? "; bfloat16 rows' % GEMM is of this one" : "");
  }

  for (const Record& r : records) {
    const Config& c = r.config;
    if (c.kind != Kind::Core || c.impl != "fused" || c.Hkv != 0) continue;  // prefill rows: reported below
    const Record* fused = find(records, Kind::Core, "fused", c.Tq, c.causal, c.dtype);
    fmt::print("  core T={} {}{}: fused vs math {}, vs torch_sdpa {}\n", c.Tq, c.causal ? "causal" : "noncausal",
               dtype_suffix(c), speedup(fused, find(records, Kind::Core, "math", c.Tq, c.causal, c.dtype)),
               speedup(fused, find(records, Kind::Core, "torch_sdpa", c.Tq, c.causal, c.dtype)));
  }
  for (const Record& r : records) {
    const Config& c = r.config;
    if (c.kind != Kind::Core || c.impl != "fused" || c.causal || c.Hkv != 0) continue;
    const Record* dense = find(records, Kind::Core, "fused", c.Tq, false, c.dtype);
    const Record* causal = find(records, Kind::Core, "fused", c.Tq, true, c.dtype);
    fmt::print("  core T={}{} fused causal/noncausal time: {} (about 0.5 if masked tiles are skipped)\n", c.Tq,
               dtype_suffix(c),
               dense && causal
                   ? fmt::format("{:.2f}", causal->measurement->ms_median / dense->measurement->ms_median)
                   : "n/a");
  }
  for (const Record& r : records) {
    const Config& c = r.config;
    if (c.kind != Kind::Module || c.impl != "attn_mha") continue;
    const Record* torch_mha = find(records, Kind::Module, "torch_mha", c.Tq, false, c.dtype);
    fmt::print("  mha T={}{}: attn_mha vs torch_mha {}, attn_mha_math vs torch_mha {}\n", c.Tq, dtype_suffix(c),
               speedup(find(records, Kind::Module, "attn_mha", c.Tq, false, c.dtype), torch_mha),
               speedup(find(records, Kind::Module, "attn_mha_math", c.Tq, false, c.dtype), torch_mha));
  }
  for (const Record& r : records) {
    const Config& c = r.config;
    if (c.kind != Kind::Training || c.impl != "fused") continue;
    const Record* fused = find(records, Kind::Training, "fused", c.Tq, c.causal, c.dtype);
    const Record* math = find(records, Kind::Training, "math", c.Tq, c.causal, c.dtype);
    const Record* sdpa = find(records, Kind::Training, "torch_sdpa", c.Tq, c.causal, c.dtype);
    // Above the process's own baseline, so that the growth with T is visible (linear vs quadratic).
    const auto rss = [](const Record* x) {
      return x ? fmt::format("{:.0f} MiB (+{:.0f})", x->measurement->peak_rss_mib,
                             x->measurement->peak_rss_mib - x->measurement->base_rss_mib)
               : "n/a";
    };
    fmt::print("  train T={} {}{}: fused vs math {}, vs torch_sdpa {}; peak RSS fused {}, math {}, torch_sdpa {}\n",
               c.Tq, c.causal ? "causal" : "noncausal", dtype_suffix(c), speedup(fused, math), speedup(fused, sdpa),
               rss(fused), rss(math), rss(sdpa));
  }
  const double bandwidth = bandwidth_gbps(records);
  for (const Record& r : records) {
    if (r.config.kind != Kind::Bandwidth || !std::isfinite(bandwidth)) continue;
    fmt::print("  bandwidth ceiling (sum over {:.0f} MiB of float32): {:.1f} GB/s\n", bytes_read(r.config) / (1 << 20),
               bandwidth);
  }
  print_gpu_ratios(records, ceilings);
  // One decode step: ours vs the math path and LibTorch's SDPA on the same cache, and our share of the ceiling.
  for (const Record& r : records) {
    const Config& c = r.config;
    if (c.kind != Kind::Decode || c.impl != "decode" || !c.cache.empty() || !r.measurement) continue;
    const Record* kernel = find_peer(records, c, "decode_kernel");
    fmt::print("  decode B={} H={} Hkv={} L={}{}{}: {:.3f} ms/token, {:.1f} GB/s ({} of the ceiling); vs math {}, "
               "vs torch_sdpa {}{}{}\n",
               c.B, c.H, kv_heads(c), c.Tk, c.lengths.empty() ? "" : " ragged", dtype_suffix(c),
               r.measurement->ms_median, r.gbps(), number_or_dash(r.gbps() / bandwidth * 100, "{:.0f}%"),
               speedup(&r, find_peer(records, c, "math")),
               speedup(&r, find_peer(records, c, c.lengths.empty() ? "torch_sdpa" : "torch_sdpa_masked")),
               kernel ? fmt::format("; attn's decode kernel alone {:.1f} GB/s ({})", kernel->gbps(),
                                    number_or_dash(kernel->gbps() / bandwidth * 100, "{:.0f}%"))
                      : "",
               kernel ? fmt::format(", {} vs torch_sdpa", speedup(kernel, find_peer(records, c, "torch_sdpa"))) : "");
  }
  // Another cache form against the contiguous cache of the query's dtype, on the same step.
  for (const Record& r : records) {
    const Config& c = r.config;
    if (c.kind != Kind::Decode || c.cache.empty() || !r.measurement) continue;
    Config plain = c;
    plain.cache.clear();
    const Record* peer = find_peer(records, plain, c.impl);
    // A paged int8 cache is also set beside the contiguous int8 cache.
    Config int8 = c;
    int8.cache = "int8";
    const CacheForm form = cache_form(c);
    const Record* int8_peer = form.int8 && form.paged() ? find_peer(records, int8, c.impl) : nullptr;
    fmt::print("  decode B={} H={} Hkv={} L={}{} over the {} cache: {:.3f} ms/token, {:.1f} GB/s ({} of the ceiling) "
               "in {:.2f}x the bytes of the{} cache; {} its speed{}\n",
               c.B, c.H, kv_heads(c), c.Tk, dtype_suffix(c), c.cache, r.measurement->ms_median, r.gbps(),
               number_or_dash(r.gbps() / bandwidth * 100, "{:.0f}%"), bytes_read(c) / bytes_read(plain),
               dtype_suffix(c), speedup(&r, peer),
               int8_peer ? fmt::format(", {} the int8 cache's", speedup(&r, int8_peer)) : "");
  }
  // A decoding step's product: attn::linear against at::linear on the same weight, and its share of the ceiling.
  for (const Record& r : records) {
    const Config& c = r.config;
    if (c.kind != Kind::Linear || c.impl != "attn_linear" || !r.measurement) continue;
    fmt::print("  linear rows={} {}x{}{}: {:.1f} GB/s ({} of the ceiling); vs at::linear {}\n", c.Tq, c.Tk, c.d,
               dtype_suffix(c), r.gbps(), number_or_dash(r.gbps() / bandwidth * 100, "{:.0f}%"),
               speedup(&r, find_peer(records, c, "at_linear")));
  }
  // Weights that share x: one attn::linear_many against an attn::linear each.
  for (const Record& r : records) {
    const Config& c = r.config;
    if (c.kind != Kind::Linear || c.impl != "attn_linear_many" || !r.measurement) continue;
    fmt::print("  linear rows={} {} weights of {}x{}{} in one pass: {:.1f} GB/s; vs a call each {}\n", c.Tq,
               c.outs.size(), c.Tk, c.d, dtype_suffix(c), r.gbps(), speedup(&r, find_peer(records, c, "attn_linear_each")));
  }
  const Record* gqa = nullptr;
  const Record* mha = nullptr;
  for (const Record& r : records) {
    if (r.config.name.rfind("prefill/", 0) != 0 || !r.measurement) continue;
    (kv_heads(r.config) < r.config.H ? gqa : mha) = &r;
  }
  if (gqa && mha) {
    fmt::print("  prefill T={} causal, {} query heads: {} K/V heads {:.1f} ms, {} K/V heads {:.1f} ms "
               "(GQA/MHA time {:.2f})\n",
               gqa->config.Tq, gqa->config.H, kv_heads(gqa->config), gqa->measurement->ms_median,
               kv_heads(mha->config), mha->measurement->ms_median,
               gqa->measurement->ms_median / mha->measurement->ms_median);
  }
  // The variants suite: the window's time against full causal attention, each score term's cost over plain
  // causal attention, and a ragged batch packed against padded.
  const auto find_variant = [&](const std::string& name) -> const Record* {
    for (const Record& r : records)
      if (r.config.name == name && r.measurement) return &r;
    return nullptr;
  };
  for (const Record& r : records) {
    const Config& c = r.config;
    if (c.kind != Kind::Variant || !r.measurement) continue;
    if (c.window > 0) {
      const Record* full = find_variant(fmt::format("variants/fused/T={}/causal", c.Tq));
      if (!full) continue;
      fmt::print("  variants T={} causal window={}: {:.2f}x the time of full causal (target <= 0.2); {:.1f}% of the "
                 "GEMM ceiling on its T x window FLOPs, full causal {:.1f}%\n",
                 c.Tq, c.window, r.measurement->ms_median / full->measurement->ms_median, r.pct_of(ceilings.of(c.dtype)),
                 full->pct_of(ceilings.of(c.dtype)));
    } else if (!c.term.empty()) {
      const Record* plain = find_variant(fmt::format("variants/fused/T={}/causal", c.Tq));
      if (!plain) continue;
      fmt::print("  variants T={} causal {}: {:+.1f}% time over plain fused (target <= +15%)\n", c.Tq, c.term,
                 (r.measurement->ms_median / plain->measurement->ms_median - 1) * 100);
    } else if (c.impl == "packed") {
      const Record* padded = find_variant(fmt::format("varlen/padded/B={}/causal", c.lengths.size()));
      if (!padded) continue;
      fmt::print("  varlen {} sequences ({} to {} tokens) causal: packed vs padded to the longest {} (target >= 1.5x)\n",
                 c.lengths.size(), *std::min_element(c.lengths.begin(), c.lengths.end()),
                 *std::max_element(c.lengths.begin(), c.lengths.end()), speedup(&r, padded));
    }
  }
  for (const Record& r : records)
    if (r.config.kind == Kind::LongContext && r.measurement)
      fmt::print("  long T={}: fused forward {:.0f} ms, peak RSS {:.0f} MiB\n", r.config.Tq, r.measurement->ms_median,
                 r.measurement->peak_rss_mib);

  for (const Record& r : records)
    if (r.measurement) {
      fmt::print("  threads: {} (at::get_num_threads in each configuration's process; see --threads)\n",
                 r.measurement->threads);
      fmt::print("  peak RSS includes the process's own {:.0f} MiB (libtorch loaded, no inputs yet)\n",
                 r.measurement->base_rss_mib);
      break;
    }
}

std::string to_json(const std::vector<Record>& records, const Ceilings& ceilings, const std::string& device,
                    const std::string& cpu_kernel) {
  std::vector<std::string> objects;
  for (const Record& r : records) {
    if (!r.skipped.empty()) continue;
    const Config& c = r.config;
    std::string o = fmt::format(
        "  {{\"name\": {}, \"impl\": {}, \"B\": {}, \"H\": {}, \"Hkv\": {}, \"Tq\": {}, \"Tk\": {}, \"d\": {}, "
        "\"causal\": {}, \"dtype\": {}, \"device\": {}, \"ms_median\": {}, \"gflops\": {}, \"pct_gemm_ceiling\": {}, "
        "\"gemm_ceiling_dtype\": {}, \"peak_rss_mib\": {}",
        json_string(c.name), json_string(c.impl), c.B, c.H, kv_heads(c), c.Tq, c.Tk, c.d, c.causal ? "true" : "false",
        json_string(c.dtype), json_string(device), json_number(r.measurement ? r.measurement->ms_median : kNaN),
        json_number(r.gflops()), json_number(r.pct_of(ceilings.of(c.dtype))), json_string(ceilings.dtype_of(c.dtype)),
        json_number(r.measurement ? r.measurement->peak_rss_mib : kNaN));
    o += fmt::format(", \"peak_device_mib\": {}, \"gbps\": {}",
                     json_number(r.measurement ? r.measurement->peak_device_mib : kNaN), json_number(r.gbps()));
    if (r.measurement && !r.measurement->alternated_with.empty())
      o += fmt::format(", \"alternated_with\": {}, \"alternated_speedup\": {}",
                       json_string(r.measurement->alternated_with), json_number(r.measurement->alternated_speedup));
    if (!cpu_kernel.empty()) o += ", \"cpu_kernel\": " + json_string(cpu_kernel);
    if (!r.error.empty()) o += ", \"error\": " + json_string(r.error);
    objects.push_back(o + "}");
  }
  return objects.empty() ? "[]\n" : fmt::format("[\n{}\n]\n", fmt::join(objects, ",\n"));
}


}  // namespace bench
