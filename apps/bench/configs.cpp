// The suites: every configuration attn-bench can run, in one table, and the FLOPs it is credited with.

#include "bench.h"

#include <attn/cpu_kernel_info.h>

#include <fmt/core.h>

#include <algorithm>
#include <regex>

namespace bench {

const double kMaxScoreBytes = 6.0 * (1 << 30);
const double kBandwidthBytes = 1.0 * (1 << 30);

namespace {

// Shapes shared by the suites: one sequence, 8 heads of 64 (E = 512), the shape design.md's peer numbers use.
constexpr int64_t kB = 1, kH = 8, kD = 64;
constexpr int64_t kGemmN = 2048;  // the ceilings: a 2048³ torch::mm in float32 (and bfloat16)

// THE SUITE TABLE. Everything a suite runs is derived from one row here. "quick" must finish in under
// 3 minutes on the 2-core reference machine: measured 2m05s at LibTorch's default of 1 thread there, of which
// long/fused/T=32768 is 40 s. "full" adds longer sequences and more reps. "peer" is ours against LibTorch's
// own SDPA (on 2.x its fused CPU flash kernel) in both dtypes, causal and not, forward and training.
struct SuiteSpec {
  const char* name;
  int warmup, reps;                     // defaults, for every configuration without a cap
  std::vector<std::string> dtypes;      // of the attention rows (the GEMM ceiling is float32)
  std::vector<std::string> core_impls;  // forward of the functional core, causal and not
  std::vector<int64_t> core_T;
  std::vector<std::string> module_impls;  // multi-head attention modules
  std::vector<int64_t> module_T;
  std::vector<std::string> training_impls;  // forward + backward of the functional core
  std::vector<bool> training_causal;
  std::vector<int64_t> training_T;
  std::vector<int64_t> long_T;  // fused forward only, no warm-up
  int long_reps;                // at most this many reps at long T (each takes many seconds)
};

const std::vector<std::string> kCoreImpls{"fused", "math", "torch_sdpa"};
const std::vector<std::string> kModuleImpls{"attn_mha", "attn_mha_math", "torch_mha"};

const SuiteSpec kSuites[] = {
    {"quick", 1, 3, {"float32"}, kCoreImpls, {1024, 2048, 4096}, kModuleImpls, {1024, 4096}, {"fused", "math"},
     {false}, {1024, 2048, 4096}, {16384, 32768}, 1},
    {"full", 2, 5, {"float32"}, kCoreImpls, {1024, 2048, 4096, 8192}, kModuleImpls, {1024, 2048, 4096, 8192},
     {"fused", "math", "torch_sdpa"}, {false, true}, {1024, 2048, 4096}, {16384, 32768}, 2},
    {"peer", 1, 5, {"float32", "bfloat16"}, {"fused", "torch_sdpa"}, {1024, 2048, 4096}, {"attn_mha", "torch_mha"},
     {1024, 4096}, {"fused", "torch_sdpa"}, {false, true}, {1024, 2048, 4096}, {}, 0},
};

// Named prefix/impl/T=…[/causal|/noncausal][/dtype]; float32, the default, is not named.
Config attention(Kind kind, const std::string& prefix, const std::string& impl, int64_t T, bool causal,
                 bool name_causal, const std::string& dtype = "float32") {
  Config c;
  c.name = fmt::format("{}/{}/T={}{}{}", prefix, impl, T, name_causal ? (causal ? "/causal" : "/noncausal") : "",
                       dtype == "float32" ? "" : "/" + dtype);
  c.dtype = dtype;
  c.kind = kind;
  c.impl = impl;
  c.B = kB, c.H = kH, c.Tq = T, c.Tk = T, c.d = kD;
  c.causal = causal;
  return c;
}

Suite build(const SuiteSpec& spec) {
  Suite suite{spec.name, spec.warmup, spec.reps, {}};
  auto& out = suite.configs;

  Config gemm;  // first: every other record is reported as a percentage of the ceiling of its dtype
  gemm.name = fmt::format("gemm/{}", kGemmN);
  gemm.kind = Kind::Gemm;
  gemm.impl = "gemm";
  gemm.Tq = gemm.Tk = gemm.d = kGemmN;
  out.push_back(gemm);
  if (std::find(spec.dtypes.begin(), spec.dtypes.end(), "bfloat16") != spec.dtypes.end()) {
    gemm.name += "/bfloat16";
    gemm.dtype = "bfloat16";
    out.push_back(gemm);
  }

  // Training rows are named causal or not only where the suite runs both, so the quick suite's names stay.
  const bool name_training_causal = spec.training_causal.size() > 1;
  for (const std::string& dtype : spec.dtypes) {
    for (int64_t T : spec.core_T)
      for (bool causal : {false, true})
        for (const std::string& impl : spec.core_impls)
          out.push_back(attention(Kind::Core, "core", impl, T, causal, true, dtype));
    for (int64_t T : spec.module_T)
      for (const std::string& impl : spec.module_impls)
        out.push_back(attention(Kind::Module, "mha", impl, T, false, false, dtype));
    for (int64_t T : spec.training_T)
      for (bool causal : spec.training_causal)
        for (const std::string& impl : spec.training_impls)
          out.push_back(attention(Kind::Training, "train", impl, T, causal, name_training_causal, dtype));
  }
  for (int64_t T : spec.long_T) {
    Config c = attention(Kind::LongContext, "long", "fused", T, false, false);
    c.max_warmup = 0;
    c.max_reps = spec.long_reps;
    out.push_back(c);
  }
  return suite;
}

// The decode suite (issue 12's shapes): one step of 32 query heads of 128 against a cache of L positions, for
// B in {1, 8} and 8 or 32 K/V heads, by our decode kernel (attn::attention_with_kv_cache), the math path on the
// same cache, and LibTorch's SDPA on it; the bandwidth ceiling first. Then prefill with and without GQA.
constexpr int64_t kDecodeHeads = 32, kDecodeDim = 128;
// Caches larger than this (K + V, plus the repeated copy SDPA needs without enable_gqa) are skipped. The in-turn
// paged rows hold twice what they read (their pools fill 2B sequences and read every other one), so up to
// 9 GiB of the 24 the bench's machines have.
constexpr double kMaxCacheBytes = 4.5 * (1 << 30);

Suite build_decode_suite() {
  Suite suite{"decode", 1, 5, {}};
  auto& out = suite.configs;
  Config ceiling;
  ceiling.name = "bandwidth/sum-1GiB";
  ceiling.kind = Kind::Bandwidth;
  ceiling.impl = "sum";
  out.push_back(ceiling);
  for (const std::string dtype : {"float32", "bfloat16"})
    for (int64_t B : {1, 8})
      for (int64_t Hkv : {8, 32})
        for (int64_t L : {1024, 8192, 32768})
          for (const std::string impl : {"decode", "math", "torch_sdpa"}) {
            Config c;
            c.name = fmt::format("decode/{}/B={}/Hkv={}/L={}{}", impl, B, Hkv, L,
                                 dtype == "float32" ? "" : "/" + dtype);
            c.kind = Kind::Decode;
            c.impl = impl;
            c.B = B, c.H = kDecodeHeads, c.Hkv = Hkv, c.Tq = 1, c.Tk = L, c.d = kDecodeDim;
            c.causal = true;
            c.dtype = dtype;
            out.push_back(c);
            // The same step of a bfloat16 model over an int8 cache (KVCacheOptions().dtype(torch::kInt8)) and
            // over a paged cache (PagedKVCache) in blocks of 16 (vLLM's default): each sequence's blocks taken in
            // order (as a prompt's are), taken in turn by a batch growing together, in the cache's runs
            // (interleaved) and a block at a time (scattered); scattered in blocks of 128 (vLLM's size on the
            // CPU with IPEX); and a paged int8 cache the same ways.
            if (impl == "decode" && dtype == "bfloat16") {
              for (const std::string cache :
                   {"int8", "paged16", "paged16-interleaved", "paged16-scattered", "paged128-scattered", "int8-paged16",
                    "int8-paged16-interleaved", "int8-paged16-scattered", "int8-paged128-scattered"}) {
                Config form = c;
                form.name += "/" + cache + "-cache";
                form.cache = cache;
                out.push_back(form);
              }
            }
          }
  // Steps of several tokens (speculative decoding's verification, a chunked prefill's last chunk), causal among
  // themselves: Tq tokens times the group of 4 are the query rows that share a K/V head, 8 to 32 of them, on
  // both sides of the rows from which a bfloat16 step multiplies on AMX's tiles (ops::cpu::kAmxDecodeMinRows).
  for (int64_t B : {1, 8})
    for (int64_t Tq : {2, 4, 8})
      for (const std::string impl : {"decode", "torch_sdpa"}) {
        Config c;
        c.name = fmt::format("decode/{}/B={}/Hkv=8/L=8192/Tq={}/bfloat16", impl, B, Tq);
        c.kind = Kind::Decode;
        c.impl = impl;
        c.B = B, c.H = kDecodeHeads, c.Hkv = 8, c.Tq = Tq, c.Tk = 8192, c.d = kDecodeDim;
        c.causal = true;
        c.dtype = "bfloat16";
        out.push_back(c);
      }
  // A decoding step's products, x [rows, in] times a weight [out, in]: SmolLM2-135M's LM head and MLP, and a
  // 7B model's square projection; attn::linear against at::linear (what torch::nn::Linear calls). 16 rows is
  // the most attn's kernel takes; 128 rows (ops::kWidenedGemmMinRows, from which bfloat16 may be widened for the
  // float GEMM) and 512, SmolLM2's MLP in a prefill, are a GEMM's work.
  for (const std::string dtype : {"float32", "bfloat16"})
    for (const auto& [out_features, in_features] :
         std::vector<std::pair<int64_t, int64_t>>{{49152, 576}, {1536, 576}, {576, 1536}, {4096, 4096}})
      for (int64_t rows : {1, 4, 16, 128, 512})
        for (const std::string impl : {"attn_linear", "at_linear"}) {
          if (rows == 512 && out_features * in_features > 1536 * 576) continue;
          Config c;
          c.name = fmt::format("linear/{}/rows={}/{}x{}{}", impl, rows, out_features, in_features,
                               dtype == "float32" ? "" : "/" + dtype);
          c.kind = Kind::Linear;
          c.impl = impl;
          c.Tq = rows, c.Tk = out_features, c.d = in_features;
          c.dtype = dtype;
          out.push_back(c);
        }
  // A decoding step's q, k and v projections (SmolLM2-135M's 576 + 192 + 192 features of 576) of one row: one
  // attn::linear_many against an attn::linear each, on weights that come from memory as a model's do.
  for (const std::string dtype : {"float32", "bfloat16"})
    for (const std::string impl : {"attn_linear_many", "attn_linear_each"}) {
      Config c;
      c.name = fmt::format("linear/{}/rows=1/576+192+192x576{}", impl, dtype == "float32" ? "" : "/" + dtype);
      c.kind = Kind::Linear;
      c.impl = impl;
      c.Tq = 1, c.Tk = 960, c.d = 576;
      c.outs = {576, 192, 192};
      c.dtype = dtype;
      out.push_back(c);
    }
  for (int64_t Hkv : {8, 32}) {
    Config c;
    c.name = fmt::format("prefill/fused/T=2048/Hkv={}", Hkv);
    c.kind = Kind::Core;
    c.impl = "fused";
    c.B = 1, c.H = kDecodeHeads, c.Hkv = Hkv, c.Tq = c.Tk = 2048, c.d = kDecodeDim;
    c.causal = true;
    out.push_back(c);
  }
  return suite;
}

// The variants suite (issue 14's targets): a sliding window of 4096 against full causal attention at T=32768,
// each score term against plain causal attention at T=4096, and a ragged batch packed against the same batch
// padded to its longest sequence. Every row runs the fused kernel.
constexpr int64_t kWindowT = 32768, kWindow = 4096, kTermT = 4096;
const std::vector<int64_t> kRaggedLengths{4096, 256, 1024, 512, 2048, 384, 3072, 768};

Suite build_variants_suite() {
  Suite suite{"variants", 1, 5, {}};
  auto& out = suite.configs;
  Config gemm;
  gemm.name = fmt::format("gemm/{}", kGemmN);
  gemm.kind = Kind::Gemm;
  gemm.impl = "gemm";
  gemm.Tq = gemm.Tk = gemm.d = kGemmN;
  out.push_back(gemm);
  const auto variant = [](const std::string& name, const std::string& impl, int64_t T) {
    Config c;
    c.name = name;
    c.kind = Kind::Variant;
    c.impl = impl;
    c.B = kB, c.H = kH, c.Tq = c.Tk = T, c.d = kD;
    c.causal = true;
    return c;
  };
  Config full = variant(fmt::format("variants/fused/T={}/causal", kWindowT), "fused", kWindowT);
  full.max_warmup = 0, full.max_reps = 1;  // ~10 s a call on 2 cores
  out.push_back(full);
  Config window = variant(fmt::format("variants/fused/T={}/causal/window={}", kWindowT, kWindow), "fused", kWindowT);
  window.window = kWindow;
  window.max_warmup = 0, window.max_reps = 3;
  out.push_back(window);
  for (const std::string term : {"", "softcap", "alibi", "sinks"}) {
    Config c = variant(fmt::format("variants/fused/T={}/causal{}", kTermT, term.empty() ? "" : "/" + term), "fused",
                       kTermT);
    c.term = term;
    out.push_back(c);
  }
  for (const std::string impl : {"packed", "padded"}) {
    Config c = variant(fmt::format("varlen/{}/B={}/causal", impl, kRaggedLengths.size()), impl,
                       *std::max_element(kRaggedLengths.begin(), kRaggedLengths.end()));
    c.lengths = kRaggedLengths;
    c.B = static_cast<int64_t>(kRaggedLengths.size());
    out.push_back(c);
  }
  return suite;
}

// The GPU suite (issue 35's tables, FlashAttention's benchmark shapes): bfloat16, 16k tokens per batch
// (B = 16384 / T) and 2048 channels (H = 2048 / d). The attention core by attn (Backend::Auto) against
// LibTorch's SDPA; MultiHeadAttention against the same composition of at::linear and SDPA and against
// torch::nn::MultiheadAttention; decode steps of 32 query heads over 8 K/V heads of 128 against the bandwidth
// of a 4 GiB read; and the variants at T = 16k and 32k against plain causal attention, time and GPU memory.
// Every row runs in the bench's own process (a GPU's memory is measured by its allocator, not by RSS).
constexpr int64_t kGpuTokens = 16384, kGpuChannels = 2048, kGpuGemmN = 8192;

Suite build_gpu_suite() {
  Suite suite{"gpu", 2, 10, {}};
  auto& out = suite.configs;
  Config gemm;
  gemm.name = fmt::format("gemm/{}/bfloat16", kGpuGemmN);
  gemm.kind = Kind::Gemm;
  gemm.impl = "gemm";
  gemm.Tq = gemm.Tk = gemm.d = kGpuGemmN;
  gemm.dtype = "bfloat16";
  gemm.gpu = true;
  out.push_back(gemm);
  Config ceiling;
  ceiling.name = "bandwidth/sum-4GiB";
  ceiling.kind = Kind::Bandwidth;
  ceiling.impl = "sum";
  ceiling.gpu = true;
  ceiling.bandwidth_gib = 4;
  out.push_back(ceiling);
  const auto shaped = [](Kind kind, const std::string& name, const std::string& impl, int64_t d, int64_t T) {
    Config c;
    c.name = name;
    c.kind = kind;
    c.impl = impl;
    c.B = kGpuTokens / T, c.H = kGpuChannels / d, c.Tq = c.Tk = T, c.d = d;
    c.dtype = "bfloat16";
    c.gpu = true;
    return c;
  };
  for (int64_t d : {64, 128})
    for (int64_t T : {1024, 2048, 4096, 8192, 16384})
      for (bool causal : {false, true})
        for (const std::string impl : {"torch_sdpa", "auto"}) {  // the peer first: run order favours neither
          Config c = shaped(Kind::Core,
                            fmt::format("gpu-core/{}/d={}/T={}/{}", impl, d, T, causal ? "causal" : "noncausal"), impl,
                            d, T);
          c.causal = causal;
          out.push_back(c);
        }
  for (int64_t T : {1024, 4096, 16384})
    for (const std::string impl : {"attn_mha", "sdpa_linear", "torch_mha"}) {
      if (impl == "torch_mha" && T > 4096) continue;  // its C++ forward materialises [B·H, T, T] weights
      out.push_back(shaped(Kind::Module, fmt::format("gpu-mha/{}/T={}", impl, T), impl, 128, T));
    }
  // Decode steps: rows of one length (Backend::Auto gives them to LibTorch's kernels; decode_kernel forces
  // attn's), and a ragged batch, rows of L/8 to L keys (attn's decode kernel, against SDPA with a mask).
  const auto decode = [&](const std::string& name, const std::string& impl, int64_t B, int64_t L) {
    Config c;
    c.name = name;
    c.kind = Kind::Decode;
    c.impl = impl;
    c.B = B, c.H = kDecodeHeads, c.Hkv = 8, c.Tq = 1, c.Tk = L, c.d = kDecodeDim;
    c.causal = true;
    c.dtype = "bfloat16";
    c.gpu = true;
    return c;
  };
  for (const auto& [B, L] : std::vector<std::pair<int64_t, int64_t>>{{1, 32768}, {8, 8192}, {8, 32768}, {32, 8192}, {32, 32768}})
    for (const std::string impl : {"torch_sdpa", "decode", "decode_kernel"})
      out.push_back(decode(fmt::format("gpu-decode/{}/B={}/L={}", impl, B, L), impl, B, L));
  for (const int64_t L : {8192, 32768})
    for (const std::string impl : {"torch_sdpa_masked", "decode"}) {
      Config c = decode(fmt::format("gpu-decode-ragged/{}/B=8/L={}", impl, L), impl, 8, L);
      for (int64_t b = 1; b <= 8; ++b) c.lengths.push_back(L * b / 8);
      out.push_back(c);
    }
  for (int64_t T : {16384, 32768}) {
    for (const std::string term : {"", "window", "softcap", "alibi", "sinks"}) {
      Config c = shaped(Kind::Variant, fmt::format("gpu-variants/auto/T={}/causal{}", T, term.empty() ? "" : "/" + term),
                        "auto", 128, T);
      c.B = 1, c.H = 16;
      c.causal = true;
      if (term == "window") c.window = 4096;
      else c.term = term;
      out.push_back(c);
    }
    // The variants suite's ragged batch of 8 sequences, scaled to about T tokens in all, packed against padded
    // to the longest.
    int64_t total = 0;
    for (int64_t length : kRaggedLengths) total += length;
    std::vector<int64_t> lengths;
    for (int64_t length : kRaggedLengths) lengths.push_back(length * T / total);
    for (const std::string impl : {"packed", "padded"}) {
      Config c = shaped(Kind::Variant, fmt::format("gpu-varlen/{}/T={}/causal", impl, T), impl, 128, T);
      c.H = 16;
      c.causal = true;
      c.lengths = lengths;
      c.B = static_cast<int64_t>(lengths.size());
      c.Tq = c.Tk = *std::max_element(lengths.begin(), lengths.end());
      out.push_back(c);
    }
  }
  return suite;
}

// Implementations that hold the whole [B, H, Tq, Tk] score matrix in memory.
bool materialises_scores(const Config& c) {
  if (c.gpu) return c.impl == "torch_mha";
  return c.kind != Kind::Gemm && c.kind != Kind::Variant && c.kind != Kind::Linear && c.impl != "fused" &&
         c.impl != "attn_mha";
}

}  // namespace

std::optional<Suite> make_suite(const std::string& name) {
  for (const auto& spec : kSuites)
    if (name == spec.name) return build(spec);
  if (name == "decode") return build_decode_suite();
  if (name == "variants") return build_variants_suite();
  if (name == "gpu") return build_gpu_suite();
  return std::nullopt;
}

std::vector<std::string> suite_names() {
  std::vector<std::string> names;
  for (const auto& spec : kSuites) names.emplace_back(spec.name);
  names.emplace_back("decode");
  names.emplace_back("variants");
  names.emplace_back("gpu");
  return names;
}

std::optional<Config> find_config(const std::string& name) {
  for (const std::string& suite_name : suite_names()) {
    const Suite suite = *make_suite(suite_name);  // a named copy: the loop below must not outlive it
    for (const Config& c : suite.configs)
      if (c.name == name) return c;
  }
  return std::nullopt;
}

bool same_shape(const Config& a, const Config& b) {
  return a.kind == b.kind && a.B == b.B && a.H == b.H && a.Hkv == b.Hkv && a.Tq == b.Tq && a.Tk == b.Tk &&
         a.d == b.d && a.causal == b.causal && a.dtype == b.dtype && a.lengths == b.lengths && a.cache == b.cache &&
         a.outs == b.outs;
}

bool is_alternation_peer(const std::string& impl) {
  return impl == "torch_sdpa" || impl == "torch_mha" || impl == "at_linear";
}

double attended_pairs(const Config& c) {
  // Causal pairs of one sequence of length T within a window of W keys (W < 0: unbounded).
  const auto causal_pairs = [&](double T) {
    if (c.window < 0 || c.window >= T) return T * (T + 1) / 2;
    const double W = static_cast<double>(c.window);
    return W * (W + 1) / 2 + (T - W) * W;
  };
  if (c.lengths.empty()) return c.B * causal_pairs(static_cast<double>(c.Tq));
  double pairs = 0;
  for (int64_t length : c.lengths) pairs += causal_pairs(static_cast<double>(length));
  return pairs;  // the padded batch is credited with the same useful work
}

CacheForm cache_form(const Config& c) {
  // "" | "int8" | "pagedN" | "int8-pagedN", each paged form with "-interleaved", "-scattered" or neither.
  static const std::regex pattern(R"(^(?:(int8)|(int8-)?paged([1-9][0-9]{0,5})(-interleaved|-scattered)?)?$)");
  std::smatch m;
  if (!std::regex_match(c.cache, m, pattern)) throw std::invalid_argument("unknown cache '" + c.cache + "'");
  CacheForm form;
  form.int8 = m[1].matched || m[2].matched;
  form.block_size = m[3].matched ? std::stoll(m[3].str()) : 0;
  if (m[4].matched) {
    form.placement = m[4].str() == "-scattered" ? CacheForm::Placement::Scattered : CacheForm::Placement::Interleaved;
  }
  return form;
}

double bytes_read(const Config& c) {
  const double element = c.dtype == "float32" ? 4.0 : 2.0;
  if (c.kind == Kind::Bandwidth) return kBandwidthBytes * static_cast<double>(c.bandwidth_gib);
  if (c.kind == Kind::Decode) {  // K and V, read once: every row's written keys
    double keys = static_cast<double>(c.B) * c.Tk;
    if (!c.lengths.empty()) {
      keys = 0;
      for (int64_t length : c.lengths) keys += static_cast<double>(length);
    }
    // An int8 row: one byte per element and its float32 scale.
    const double row = cache_form(c).int8 ? c.d + 4.0 : element * c.d;
    return kv_heads(c) * keys * 2.0 * row;
  }
  if (c.kind == Kind::Linear) return element * c.Tk * c.d;  // the weight, read once
  return 0;
}

double flops(const Config& c) {
  const double B = c.B, H = c.H, Tq = c.Tq, Tk = c.Tk, d = c.d;
  if (c.kind == Kind::Gemm) return 2 * Tq * Tk * d;
  if (c.kind == Kind::Bandwidth) return 0;
  if (c.kind == Kind::Decode) return 4 * B * H * Tq * Tk * d;  // every cached key is before the new query
  if (c.kind == Kind::Linear) return 2 * Tq * Tk * d;
  if (c.kind == Kind::Variant) return 4 * H * d * attended_pairs(c);
  // Forward attention: QKᵀ and PV, 2·Tq·Tk·d each (4·B·H·Tq·Tk·d; 2·B·H·Tq·Tk·(d_k+d_v) if they differed).
  // Causal does half the pairs.
  const double attention = 4 * B * H * Tq * Tk * d * (c.causal ? 0.5 : 1.0);
  switch (c.kind) {
    case Kind::Module: {
      const double E = H * d;  // q, k, v and out projections, 2·T·E·E each
      return attention + 4 * 2 * B * Tq * E * E;
    }
    case Kind::Training:
      return attention * 3.5;  // backward counted as 2.5× forward
    default:
      return attention;
  }
}

std::optional<std::string> skip_reason(const Config& c, const std::string& device) {
  // attn widens bfloat16 to float on x86 without AVX-512, where LibTorch multiplies bfloat16 in reference loops
  // (but perhaps on a CPU with AVX-NE-CONVERT, src/ops/torch_bfloat16_gemm.h): a 2048³ product takes seconds
  // (1.13) to a minute (2.x), each rep, and its rate says nothing of attn's.
  if (c.kind == Kind::Gemm && c.dtype == "bfloat16" && device == "cpu" &&
      attn::cpu_kernel_info().bfloat16_linear == "widened") {
    return std::string(
        "attn widens bfloat16 to float on this CPU, where LibTorch's bfloat16 GEMM runs reference loops; bfloat16 "
        "rows' % GEMM is of the float32 ceiling");
  }
  if (c.kind == Kind::Decode) {
    if (c.gpu) return std::nullopt;  // LibTorch >= 2.5 reads the shared heads itself; the caches fit the GPU
    const double cache = bytes_read(c);
    const double repeated = c.impl == "torch_sdpa" && kv_heads(c) < c.H ? cache * c.H / kv_heads(c) : 0;
    if (cache + repeated > kMaxCacheBytes)
      return fmt::format("its cache{} would take {:.1f} GiB (> {:.1f})", repeated > 0 ? " and SDPA's repeated K/V" : "",
                         (cache + repeated) / (1 << 30), kMaxCacheBytes / (1 << 30));
    return std::nullopt;
  }
  const double bytes = (c.dtype == "float32" ? 4.0 : 2.0) * c.B * c.H * c.Tq * c.Tk;  // the scores' dtype
  if (materialises_scores(c) && bytes > kMaxScoreBytes)
    return fmt::format("its [B,H,Tq,Tk] scores would take {:.1f} GiB (> {:.0f})", bytes / (1 << 30),
                       kMaxScoreBytes / (1 << 30));
  return std::nullopt;
}

}  // namespace bench
