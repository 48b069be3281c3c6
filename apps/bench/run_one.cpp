// The child's side: one configuration, in a process of its own, so that VmHWM is that configuration's peak.

#include "bench.h"

#include <attn/attn.h>

#include <torch/torch.h>
#include <torch/version.h>
#ifdef ATTN_BENCH_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDACachingAllocator.h>
#endif

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <memory>
#include <fstream>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

namespace bench {
namespace {

// A line of /proc/self/status such as "VmHWM:   123456 kB", in MiB.
double proc_status_mib(const std::string& key) {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);)
    if (line.rfind(key + ":", 0) == 0) return std::stod(line.substr(key.size() + 1)) / 1024.0;
  throw std::runtime_error("no " + key + " in /proc/self/status");
}

torch::Tensor torch_sdpa(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, bool causal) {
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 5)
  // Fewer K/V heads than query heads: LibTorch reads the shared heads itself.
  return at::scaled_dot_product_attention(q, k, v, /*attn_mask=*/{}, /*dropout_p=*/0.0, causal, /*scale=*/{},
                                          /*enable_gqa=*/k.size(1) != q.size(1));
#elif TORCH_VERSION_MAJOR >= 2
  return at::scaled_dot_product_attention(q, k, v, /*attn_mask=*/{}, /*dropout_p=*/0.0, causal);
#else
  return std::get<0>(at::_scaled_dot_product_attention(q, k, v, /*attn_mask=*/{}, /*dropout_p=*/0.0,
                                                       /*need_attn_weights=*/false, causal));
#endif
}

torch::ScalarType scalar_type(const std::string& dtype) {
  if (dtype == "float32") return torch::kFloat32;
  if (dtype == "bfloat16") return torch::kBFloat16;
  throw std::invalid_argument("no dtype '" + dtype + "' in attn-bench (float32 or bfloat16)");
}

attn::Backend backend_of(const std::string& impl) {
  if (impl == "fused") return attn::Backend::Fused;
  if (impl == "math") return attn::Backend::Math;
  if (impl == "auto") return attn::Backend::Auto;
  throw std::invalid_argument("no attn backend for impl '" + impl + "'");
}

// The functional core on q, k, v [B, H, T, d], by impl.
std::function<torch::Tensor()> core_call(const Config& c, torch::Tensor q, torch::Tensor k, torch::Tensor v) {
  if (c.impl == "torch_sdpa") return [=] { return torch_sdpa(q, k, v, c.causal); };
  const auto options = attn::SdpaOptions().backend(backend_of(c.impl)).causal(c.causal);
  return [=] { return attn::scaled_dot_product_attention(q, k, v, options); };
}

// A variant configuration: the fused core with a window or a score term, or a ragged batch packed or padded.
std::function<void()> variant_workload(const Config& c, const torch::TensorOptions& opts) {
  // The GPU suite's rows take what Backend::Auto picks there; the CPU's variants suite times the fused kernel.
  auto options = attn::SdpaOptions().backend(c.gpu ? attn::Backend::Auto : attn::Backend::Fused).causal(c.causal);
  if (c.window > 0) options.window(c.window - 1, 0);
  if (c.term == "softcap") options.softcap(30.0);
  else if (c.term == "alibi") options.alibi_slopes(attn::alibi_slopes(c.H).to(opts.device()));
  else if (c.term == "sinks") options.sinks(torch::randn({c.H}, opts));
  else if (!c.term.empty()) throw std::invalid_argument("unknown score term '" + c.term + "'");
  if (c.lengths.empty()) {
    const torch::Tensor q = torch::randn({c.B, c.H, c.Tq, c.d}, opts), k = torch::randn({c.B, c.H, c.Tk, c.d}, opts),
                        v = torch::randn({c.B, c.H, c.Tk, c.d}, opts);
    return [=] { attn::scaled_dot_product_attention(q, k, v, options); };
  }
  const torch::Tensor lengths = torch::tensor(c.lengths, torch::kLong);
  const int64_t longest = lengths.max().item<int64_t>();
  if (c.impl == "packed") {
    const int64_t total = lengths.sum().item<int64_t>();
    const torch::Tensor q = torch::randn({total, c.H, c.d}, opts), k = torch::randn({total, c.H, c.d}, opts),
                        v = torch::randn({total, c.H, c.d}, opts);
    const torch::Tensor cu = torch::cat({torch::zeros({1}, torch::kLong), lengths.cumsum(0)});
    return [=] { attn::varlen_attention(q, k, v, cu, cu, longest, longest, options); };
  }
  if (c.impl != "padded") throw std::invalid_argument("unknown ragged-batch impl '" + c.impl + "'");
  // Right-padded to the longest sequence, with the padding masked: what a batch without varlen costs.
  const int64_t B = static_cast<int64_t>(c.lengths.size());
  const torch::Tensor q = torch::randn({B, c.H, longest, c.d}, opts), k = torch::randn({B, c.H, longest, c.d}, opts),
                      v = torch::randn({B, c.H, longest, c.d}, opts);
  const torch::Tensor padding = (torch::arange(longest).unsqueeze(0) >= lengths.unsqueeze(1)).unsqueeze(1);
  options.masks(attn::AttentionMasks().key_padding_mask(padding.to(opts.device())));
  return [=] { attn::scaled_dot_product_attention(q, k, v, options); };
}

// The multi-head attention that attn::MultiHeadAttention computes, written directly with ATen: four at::linear
// and LibTorch's SDPA, the heads split and merged by views. The floor of what a module can add.
std::function<void()> sdpa_linear_module(const Config& c, const torch::TensorOptions& opts) {
  const int64_t E = c.H * c.d;
  const auto weight = [&] { return torch::randn({E, E}, opts) * (1.0 / std::sqrt(static_cast<double>(E))); };
  const torch::Tensor wq = weight(), wk = weight(), wv = weight(), wo = weight();
  const torch::Tensor bq = torch::zeros({E}, opts), bk = bq.clone(), bv = bq.clone(), bo = bq.clone();
  const torch::Tensor x = torch::randn({c.B, c.Tq, E}, opts);
  return [=] {
    const auto heads = [&](const torch::Tensor& y) { return y.view({c.B, c.Tq, c.H, c.d}).transpose(1, 2); };
    const torch::Tensor o = torch_sdpa(heads(at::linear(x, wq, bq)), heads(at::linear(x, wk, bk)),
                                       heads(at::linear(x, wv, bv)), /*causal=*/false);
    at::linear(o.transpose(1, 2).reshape({c.B, c.Tq, E}), wo, bo);
  };
}

// What one timed call does. The returned callable owns its inputs (and module), built here, untimed.
std::function<void()> make_workload(const Config& c, const torch::Device& device) {
  torch::manual_seed(0);
  const auto opts = torch::TensorOptions().dtype(scalar_type(c.dtype)).device(device);
  switch (c.kind) {
    case Kind::Gemm: {
      // Into one output held across the reps: the ceiling is the product's rate. A fresh 16 MiB output each rep
      // timed its first touch too, in as many reps as glibc's heap had handed the last one back, which moved with
      // the size of the libraries loaded (bench/RESULTS.md).
      const torch::Tensor a = torch::randn({c.Tq, c.d}, opts), b = torch::randn({c.d, c.Tk}, opts);
      torch::Tensor out = torch::empty({c.Tq, c.Tk}, opts);
      return [=]() mutable { torch::mm_out(out, a, b); };
    }
    case Kind::Core:
    case Kind::LongContext: {
      auto call = core_call(c, torch::randn({c.B, c.H, c.Tq, c.d}, opts),
                            torch::randn({c.B, kv_heads(c), c.Tk, c.d}, opts),
                            torch::randn({c.B, kv_heads(c), c.Tk, c.d}, opts));
      return [=] { call(); };
    }
    case Kind::Variant:
      return variant_workload(c, opts);
    case Kind::Bandwidth: {
      const auto floats = static_cast<int64_t>(kBandwidthBytes / 4) * c.bandwidth_gib;
      const torch::Tensor x = torch::ones({floats}, opts.dtype(torch::kFloat32));
      return [=] { x.sum(); };
    }
    case Kind::Decode: {
      // A full cache of Tk positions and the step's Tq queries per head (the newest positions; one but for the
      // multi-token rows, whose steps are causal among their own tokens).
      const torch::Tensor q = torch::randn({c.B, c.H, c.Tq, c.d}, opts);
      if (c.Tq != 1 && (!c.cache.empty() || !c.lengths.empty()))
        throw std::invalid_argument("multi-token decode rows: a plain cache, full rows");
      const CacheForm form = cache_form(c);
      if (form.int8 && !form.paged()) {
        if (!c.lengths.empty() || c.impl != "decode") throw std::invalid_argument("int8 cache rows: impl decode, full rows");
        auto cache = std::make_shared<attn::KVCache>(
            attn::KVCacheOptions(1, c.B, kv_heads(c), c.d, c.Tk).dtype(torch::kInt8).device(device));
        for (int64_t filled = 0; filled < c.Tk; filled += 1024) {  // quantized a slice at a time
          const int64_t n = std::min<int64_t>(1024, c.Tk - filled);
          cache->append(0, torch::empty({c.B, kv_heads(c), n, c.d}, opts).uniform_(-1, 1),
                        torch::empty({c.B, kv_heads(c), n, c.d}, opts).uniform_(-1, 1));
        }
        const torch::Tensor starts = torch::full({c.B}, c.Tk - 1, torch::kLong);
        const auto options = attn::SdpaOptions().causal(true);
        return [=] { attn::attention_with_kv_cache(q, *cache, 0, starts, options); };
      }
      if (form.paged()) {
        if (!c.lengths.empty() || c.impl != "decode") throw std::invalid_argument("paged cache rows: impl decode, full rows");
        if (!device.is_cpu()) throw std::invalid_argument("a PagedKVCache lives on the CPU");
        const int64_t block_size = form.block_size;
        // In turn (interleaved or scattered): twice the sequences, filled a block at a time in turn; otherwise
        // each sequence takes its blocks in order, 1024 positions at a time.
        const bool in_turn = form.placement != CacheForm::Placement::InOrder;
        const int64_t sequences = in_turn ? 2 * c.B : c.B, step = in_turn ? block_size : 1024;
        const int64_t blocks = sequences * ((c.Tk + block_size - 1) / block_size);
        attn::PagedKVCacheOptions pool = attn::PagedKVCacheOptions(1, kv_heads(c), c.d, blocks, block_size)
                                                .dtype(form.int8 ? torch::kInt8 : opts.dtype().toScalarType());
        if (form.placement == CacheForm::Placement::Scattered) pool.run_positions(1);
        auto cache = std::make_shared<attn::PagedKVCache>(pool);
        std::vector<int64_t> all;
        for (int64_t b = 0; b < sequences; ++b) all.push_back(cache->add_sequence());
        for (int64_t filled = 0; filled < c.Tk; filled += step) {
          const int64_t n = std::min<int64_t>(step, c.Tk - filled);
          cache->append(0, all, torch::empty({sequences, kv_heads(c), n, c.d}, opts).uniform_(-1, 1),
                        torch::empty({sequences, kv_heads(c), n, c.d}, opts).uniform_(-1, 1));
        }
        std::vector<int64_t> ids;  // the read sequences: every other one when filled in turn
        for (int64_t b = 0; b < c.B; ++b) ids.push_back(all[in_turn ? 2 * b : b]);
        const attn::PagedBatch batch = cache->batch(0, ids);
        const torch::Tensor starts = torch::full({c.B}, c.Tk - 1, torch::kLong);
        const auto options = attn::SdpaOptions().causal(true);
        return [=] { attn::attention_with_kv_cache(q, *cache, batch, starts, options); };
      }
      const torch::Tensor k = torch::empty({c.B, kv_heads(c), c.Tk, c.d}, opts).uniform_(-1, 1);
      const torch::Tensor v = torch::empty({c.B, kv_heads(c), c.Tk, c.d}, opts).uniform_(-1, 1);
      // A ragged batch (c.lengths) fills row b's cache up to lengths[b].
      const torch::Tensor lengths =
          c.lengths.empty() ? torch::full({c.B}, c.Tk, torch::kLong) : torch::tensor(c.lengths, torch::kLong);
      const torch::Tensor starts = lengths - c.Tq;
      const bool multi_token_peer = c.impl == "torch_sdpa" && c.Tq > 1;
      if (c.impl == "torch_sdpa_masked" || multi_token_peer) {
        // LibTorch's SDPA with a boolean mask: for a ragged batch (what LibTorch offers one), each row's written
        // keys; for a step of several tokens, the cache and each other causally, key j for query t iff
        // j <= Tk - Tq + t.
        const torch::Tensor mask =
            multi_token_peer
                ? torch::arange(c.Tk).unsqueeze(0) <= torch::arange(c.Tq).unsqueeze(1) + (c.Tk - c.Tq)
                : (torch::arange(c.Tk).unsqueeze(0) < lengths.unsqueeze(1)).view({c.B, 1, 1, c.Tk});
        const torch::Tensor on_device = mask.to(opts.device());
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 5)
        return [=] {
          at::scaled_dot_product_attention(q, k, v, on_device, 0.0, false, c10::nullopt, kv_heads(c) != c.H);
        };
#else
        throw std::invalid_argument(multi_token_peer ? "multi-token torch_sdpa rows need LibTorch 2.5 or newer (enable_gqa)"
                                                     : "torch_sdpa_masked needs LibTorch 2.5 or newer (enable_gqa)");
#endif
      }
      if (c.impl == "torch_sdpa") {
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 5)
        return [=] { torch_sdpa(q, k, v, /*causal=*/false); };  // one query at the end sees every key
#else
        // No enable_gqa before 2.5: a user repeats the shared heads, and so does the timed call.
        const int64_t group = c.H / kv_heads(c);
        return [=] {
          torch_sdpa(q, k.repeat_interleave(group, 1), v.repeat_interleave(group, 1), /*causal=*/false);
        };
#endif
      }
      // decode: Backend::Auto's choice; decode_kernel: attn's decode kernel itself (Backend::Fused).
      const attn::Backend backend = c.impl == "math"            ? attn::Backend::Math
                                    : c.impl == "decode_kernel" ? attn::Backend::Fused
                                                                : attn::Backend::Auto;
      const auto options = attn::SdpaOptions().causal(true).backend(backend);
      if (c.impl != "decode" && c.impl != "decode_kernel" && c.impl != "math")
        throw std::invalid_argument("unknown decode impl '" + c.impl + "'");
      return [=] { attn::attention_with_kv_cache(q, k, v, starts, lengths, options); };
    }
    case Kind::Linear: {
      if (!c.outs.empty()) {
        // Copies of the weights to rotate through, 256 MiB in all, so that each call reads them from memory.
        const int64_t bytes = c.Tk * c.d * static_cast<int64_t>(torch::elementSize(opts.dtype().toScalarType()));
        const int64_t copies = std::max<int64_t>(2, (int64_t{256} << 20) / bytes);
        auto sets = std::make_shared<std::vector<std::vector<torch::Tensor>>>();
        for (int64_t i = 0; i < copies; ++i) {
          std::vector<torch::Tensor> set;
          for (int64_t out : c.outs) set.push_back(torch::randn({out, c.d}, opts));
          sets->push_back(std::move(set));
        }
        const torch::Tensor x = torch::randn({c.Tq, c.d}, opts);
        auto next = std::make_shared<size_t>(0);
        const auto take = [sets, next]() -> const std::vector<torch::Tensor>& {
          *next = (*next + 1) % sets->size();
          return (*sets)[*next];
        };
        if (c.impl == "attn_linear_many") return [=] { attn::linear_many(x, take()); };
        if (c.impl != "attn_linear_each") throw std::invalid_argument("unknown linear impl '" + c.impl + "'");
        return [=] {
          for (const torch::Tensor& w : take()) attn::linear(x, w);
        };
      }
      const torch::Tensor x = torch::randn({c.Tq, c.d}, opts);
      const torch::Tensor weight = torch::randn({c.Tk, c.d}, opts);
      if (c.impl == "at_linear") return [=] { at::linear(x, weight); };
      if (c.impl != "attn_linear") throw std::invalid_argument("unknown linear impl '" + c.impl + "'");
      return [=] { attn::linear(x, weight); };
    }
    case Kind::Training: {
      torch::Tensor q = torch::randn({c.B, c.H, c.Tq, c.d}, opts).requires_grad_();
      torch::Tensor k = torch::randn({c.B, c.H, c.Tk, c.d}, opts).requires_grad_();
      torch::Tensor v = torch::randn({c.B, c.H, c.Tk, c.d}, opts).requires_grad_();
      auto call = core_call(c, q, k, v);
      return [=]() mutable {
        for (torch::Tensor* t : {&q, &k, &v}) t->mutable_grad().reset();  // fresh gradients, not accumulation
        call().sum().backward();
      };
    }
    case Kind::Module: {
      const int64_t E = c.H * c.d;
      if (c.impl == "torch_mha") {
        torch::nn::MultiheadAttention mha(torch::nn::MultiheadAttentionOptions(E, c.H));
        mha->to(device, opts.dtype().toScalarType());
        mha->eval();
        const torch::Tensor x = torch::randn({c.Tq, c.B, E}, opts);  // sequence-first, as 1.13's C++ module wants
        return [=]() mutable { mha->forward(x, x, x, /*key_padding_mask=*/{}, /*need_weights=*/false); };
      }
      if (c.impl == "sdpa_linear") return sdpa_linear_module(c, opts);
      auto options = attn::MultiHeadAttentionOptions(E, c.H);
      if (c.impl == "attn_mha_math") options.backend(attn::Backend::Math);
      else if (c.impl != "attn_mha") throw std::invalid_argument("unknown module impl '" + c.impl + "'");
      attn::MultiHeadAttention mha(options);
      mha->to(device, opts.dtype().toScalarType());
      mha->eval();
      const torch::Tensor x = torch::randn({c.B, c.Tq, E}, opts);
      return [=]() mutable { mha->forward(x, x, x); };
    }
  }
  throw std::logic_error("unhandled configuration kind");
}

constexpr double kGpuRepMs = 5.0;

// The GPU allocator's peak of allocated memory since the last reset, in MiB (NaN on the CPU, or where attn-bench
// was built without CUDA).
void reset_device_peak(const torch::Device& device) {
#ifdef ATTN_BENCH_CUDA
  if (device.is_cuda()) c10::cuda::CUDACachingAllocator::resetPeakStats(device.index());
#else
  (void)device;
#endif
}

double device_peak_mib(const torch::Device& device) {
#ifdef ATTN_BENCH_CUDA
  if (device.is_cuda()) {
    // allocated_bytes[0]: the aggregate over both pools (StatType::AGGREGATE).
    return static_cast<double>(c10::cuda::CUDACachingAllocator::getDeviceStats(device.index()).allocated_bytes[0].peak) /
           (1 << 20);
  }
#else
  (void)device;
#endif
  return std::numeric_limits<double>::quiet_NaN();
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

}  // namespace

std::string check_device(const std::string& spec) { return attn::resolve_device(spec).str(); }

std::string device_name(const std::string& spec) {
#ifdef ATTN_BENCH_CUDA
  const torch::Device device = attn::resolve_device(spec);
  if (device.is_cuda()) return at::cuda::getDeviceProperties(device.index())->name;
#else
  (void)spec;
#endif
  return "";
}

namespace {

/// What every timed run shares around `time(device, m)`, which fills m's timings: the thread count, the
/// device, the base and peak RSS, no autograd graph for inference, and c10::Error turned into its message.
template <typename Time>
Measurement measured(const Config& config, const RunSettings& settings, const Time& time) {
  try {
    if (settings.threads > 0) at::set_num_threads(settings.threads);
    const torch::Device device = attn::resolve_device(settings.device);
    Measurement m;
    m.threads = at::get_num_threads();
    m.base_rss_mib = proc_status_mib("VmHWM");
    std::optional<torch::NoGradGuard> no_grad;  // inference configurations record no autograd graph
    if (config.kind != Kind::Training) no_grad.emplace();
    time(device, m);
    m.peak_rss_mib = proc_status_mib("VmHWM");
    return m;
  } catch (const c10::Error& error) {
    // c10::Error's what() carries a C++ backtrace; the report wants the message.
    throw std::runtime_error(error.what_without_backtrace());
  }
}

}  // namespace

Measurement run_config(const Config& config, const RunSettings& settings) {
  return measured(config, settings, [&](const torch::Device& device, Measurement& m) {
    // Kernels on CUDA are asynchronous: wait for them before reading the clock.
    const auto sync = [&] {
      if (device.is_cuda()) torch::cuda::synchronize();
    };
    const std::function<void()> workload = make_workload(config, device);

    for (int i = 0; i < settings.warmup; ++i) workload();
    // On a GPU a call can be shorter than the launch and synchronisation around it: a rep is as many calls as
    // fill kGpuRepMs, timed together, and the time per call is reported.
    int calls = 1;
    if (device.is_cuda()) {
      sync();
      const auto start = std::chrono::steady_clock::now();
      workload();
      sync();
      const double once = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
      calls = static_cast<int>(std::clamp(kGpuRepMs / std::max(once, 1e-3), 1.0, 10000.0));
    }
    reset_device_peak(device);
    std::vector<double> times_ms;
    for (int i = 0; i < settings.reps; ++i) {
      sync();
      const auto start = std::chrono::steady_clock::now();
      for (int j = 0; j < calls; ++j) workload();
      sync();
      times_ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count() /
                         calls);
    }
    m.ms_median = median(times_ms);
    m.peak_device_mib = device_peak_mib(device);
  });
}

Measurement run_config_alternated(const Config& config, const Config& peer, const RunSettings& settings) {
  // Named "ours" and "theirs" below; either may be LibTorch's: the parent reads each record from its side.
  return measured(config, settings, [&](const torch::Device& device, Measurement& m) {
    if (!device.is_cpu()) throw std::invalid_argument("--alternate times CPU configurations only");
    const std::function<void()> ours = make_workload(config, device), theirs = make_workload(peer, device);
    const auto time_ms = [](const std::function<void()>& workload) {
      const auto start = std::chrono::steady_clock::now();
      workload();
      return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    };
    for (int i = 0; i < settings.warmup; ++i) ours(), theirs();
    std::vector<double> ours_ms, theirs_ms, ratios;
    for (int i = 0; i < settings.reps; ++i) {
      // Which goes first alternates too, so that neither always follows the other's cache traffic.
      const bool ours_first = i % 2 == 0;
      const double a = ours_first ? time_ms(ours) : 0.0;
      const double b = time_ms(theirs);
      const double o = ours_first ? a : time_ms(ours);
      ours_ms.push_back(o);
      theirs_ms.push_back(b);
      ratios.push_back(b / o);
    }
    m.ms_median = median(ours_ms);
    m.alternated_with = peer.name;
    m.peer_ms_median = median(theirs_ms);
    m.alternated_speedup = median(ratios);
  });
}

}  // namespace bench
