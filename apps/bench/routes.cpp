// attn-bench --routes: what attn runs for each kind of call on a device, for inference and for training, as
// attn::describe_route says (the backend, and the kernel behind it). docs/backends.md's CUDA table is its output
// on a GPU.

#include "bench.h"

#include <attn/attn.h>
#include <attn/io/files.h>

#include <fmt/core.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <torch/torch.h>

#include <functional>
#include <string>
#include <vector>

namespace bench {
namespace {

constexpr int64_t kH = 8, kT = 1024, kD = 64;

struct Inputs {
  torch::Tensor q, k, v;
};

/// One kind of call: how to build its inputs and options, and which route question to ask.
struct RouteCase {
  std::string name;
  std::function<std::string(const torch::TensorOptions&, bool training)> route;
};

Inputs make(const torch::TensorOptions& o, int64_t h, int64_t h_kv, int64_t tq, int64_t tk, int64_t d, bool training) {
  Inputs in{torch::randn({1, h, tq, d}, o), torch::randn({1, h_kv, tk, d}, o), torch::randn({1, h_kv, tk, d}, o)};
  if (training)
    for (torch::Tensor* t : {&in.q, &in.k, &in.v}) t->requires_grad_();
  return in;
}

RouteCase dense(const std::string& name, int64_t h_kv, int64_t tq, int64_t d,
                const std::function<attn::SdpaOptions(const torch::TensorOptions&)>& options) {
  return {name, [=](const torch::TensorOptions& o, bool training) {
            const Inputs in = make(o, kH, h_kv, tq, kT, d, training);
            return attn::describe_route(in.q, in.k, in.v, options(o));
          }};
}

std::vector<RouteCase> route_cases() {
  using attn::SdpaOptions;
  const auto none = [](const torch::TensorOptions&) { return SdpaOptions(); };
  const auto causal = [](const torch::TensorOptions&) { return SdpaOptions().causal(true); };
  const auto device = [](const torch::TensorOptions& o) { return torch::TensorOptions().device(o.device()); };
  std::vector<RouteCase> cases{
      dense("noncausal", kH, kT, kD, none),
      dense("causal", kH, kT, kD, causal),
      dense("causal, d=128", kH, kT, 128, causal),
      dense("causal, d=256", kH, kT, 256, causal),
      dense("causal bottom-right, Tq=256 < Tk", kH, 256, kD, causal),
      dense("key_padding_mask", kH, kT, kD,
            [=](const torch::TensorOptions& o) {
              return SdpaOptions().masks(attn::AttentionMasks().key_padding_mask(
                  torch::arange(kT, device(o).dtype(torch::kLong)).ge(kT - 100).view({1, 1, kT})));
            }),
      dense("attend_mask (bool)", kH, kT, kD,
            [=](const torch::TensorOptions& o) {
              return SdpaOptions().masks(attn::AttentionMasks().attend_mask(
                  torch::ones({kT, kT}, device(o).dtype(torch::kBool)).tril()));
            }),
      dense("additive_mask", kH, kT, kD,
            [=](const torch::TensorOptions& o) {
              return SdpaOptions().masks(attn::AttentionMasks().additive_mask(torch::zeros({kT, kT}, o)));
            }),
      dense("GQA 8 query / 2 K/V heads, causal", 2, kT, kD, causal),
      dense("sliding window 256, causal", kH, kT, kD,
            [](const torch::TensorOptions&) { return SdpaOptions().causal(true).window(255, 0); }),
      dense("softcap 30, causal", kH, kT, kD,
            [](const torch::TensorOptions&) { return SdpaOptions().causal(true).softcap(30.0); }),
      dense("ALiBi, causal", kH, kT, kD,
            [=](const torch::TensorOptions& o) {
              return SdpaOptions().causal(true).alibi_slopes(attn::alibi_slopes(kH).to(o.device()));
            }),
      dense("sinks, causal", kH, kT, kD,
            [](const torch::TensorOptions& o) { return SdpaOptions().causal(true).sinks(torch::zeros({kH}, o)); }),
      dense("window + ALiBi + sinks, causal", kH, kT, kD,
            [=](const torch::TensorOptions& o) {
              return SdpaOptions().causal(true).window(255, 0).alibi_slopes(attn::alibi_slopes(kH).to(o.device()))
                  .sinks(torch::zeros({kH}, o));
            }),
      dense("softcap + window, causal", kH, kT, kD,
            [](const torch::TensorOptions&) { return SdpaOptions().causal(true).softcap(30.0).window(255, 0); }),
  };
  for (const bool window : {false, true}) {
    cases.push_back({window ? "packed sequences (varlen), window 256, causal" : "packed sequences (varlen), causal",
                     [=](const torch::TensorOptions& o, bool training) {
                       const std::vector<int64_t> cu{0, 300, 700, 1024};
                       torch::Tensor q = torch::randn({kT, kH, kD}, o), k = torch::randn({kT, kH, kD}, o);
                       torch::Tensor v = torch::randn({kT, kH, kD}, o);
                       if (training)
                         for (torch::Tensor* t : {&q, &k, &v}) t->requires_grad_();
                       const torch::Tensor cu_t = torch::tensor(cu, torch::kLong);
                       auto options = SdpaOptions().causal(true);
                       if (window) options.window(255, 0);
                       return attn::describe_varlen_route(q, k, v, cu_t, cu_t, 400, 400, options);
                     }});
  }
  struct CacheCase {
    std::string name;
    int64_t tq;
    std::vector<int64_t> lengths;
    std::function<attn::SdpaOptions(const torch::TensorOptions&)> options;
  };
  const std::vector<CacheCase> cache_cases{
      {"KV cache decode, 1 query, L=4096, 32 query / 8 K/V heads, d=128", 1, {4096, 4096}, causal},
      {"KV cache decode, rows of different lengths", 1, {4096, 1000}, causal},
      {"KV cache decode, 4 queries (speculative)", 4, {4096, 4096}, causal},
      {"KV cache decode, window 1024 + ALiBi + sinks + softcap", 1, {4096, 4096},
       [](const torch::TensorOptions& o) {
         return SdpaOptions().causal(true).window(1023, 0).softcap(30.0).alibi_slopes(attn::alibi_slopes(32).to(o.device()))
             .sinks(torch::zeros({32}, o));
       }},
      {"KV cache prefill, 512 queries", 512, {4096, 4096}, causal},
  };
  for (const CacheCase& c : cache_cases) {
    cases.push_back({c.name, [=](const torch::TensorOptions& o, bool training) {
                       const int64_t B = static_cast<int64_t>(c.lengths.size());
                       torch::Tensor q = torch::randn({B, 32, c.tq, 128}, o);
                       if (training) q.requires_grad_();
                       const torch::Tensor kc = torch::randn({B, 8, 4096, 128}, o), vc = torch::randn({B, 8, 4096, 128}, o);
                       const torch::Tensor lengths = torch::tensor(c.lengths, torch::kLong);
                       return attn::describe_route_with_kv_cache(q, kc, vc, lengths - c.tq, lengths, c.options(o));
                     }});
  }
  return cases;
}

std::string json_escaped(const std::string& text) {
  std::string out;
  for (char ch : text) {
    if (ch == '"' || ch == '\\') out += '\\';
    out += ch == '\n' ? ' ' : ch;
  }
  return out;
}

}  // namespace

void print_routes(const std::string& device, const std::string& json_path) {
  const std::string gpu = device_name(device);
  // An error in the table: what was refused, without the function's name or the advice after it (the JSON keeps
  // the message).
  const auto in_a_cell = [](const std::string& route) {
    if (route.rfind("error: ", 0) != 0) return route;
    std::string reason = route.substr(7);
    const size_t named = reason.rfind("attn::", 0) == 0 ? reason.find(": ") : std::string::npos;
    if (named != std::string::npos) reason = reason.substr(named + 2);
    reason = reason.substr(0, std::min(reason.find(';'), reason.find(", which")));
    return "refused: " + reason;
  };
  fmt::print("attn routes on {}{} (attn::describe_route: the backend, and the kernel behind it)\n", device,
             gpu.empty() ? "" : " (" + gpu + ")");
  const std::vector<std::string> dtypes{"float16", "bfloat16", "float32"};
  std::vector<std::string> rows;
  size_t width = 10;
  const std::vector<RouteCase> cases = route_cases();
  for (const RouteCase& c : cases) width = std::max(width, c.name.size());
  fmt::print("{:<{}}  {:<9}  {:<34}  {}\n", "call", width, "dtype", "inference", "training");
  for (const RouteCase& c : cases) {
    for (const std::string& dtype : dtypes) {
      const auto options = torch::TensorOptions()
                               .device(torch::Device(device))
                               .dtype(dtype == "float16" ? torch::kHalf : dtype == "bfloat16" ? torch::kBFloat16 : torch::kFloat);
      std::string routes[2];
      for (const bool training : {false, true}) {
        try {
          torch::manual_seed(0);
          std::optional<torch::NoGradGuard> no_grad;
          if (!training) no_grad.emplace();
          routes[training] = c.route(options, training);
        } catch (const c10::Error& error) {
          routes[training] = "error: " + std::string(error.what_without_backtrace()).substr(0, 120);
        }
      }
      fmt::print("{:<{}}  {:<9}  {:<34}  {}\n", c.name, width, dtype, in_a_cell(routes[0]), in_a_cell(routes[1]));
      rows.push_back(fmt::format("  {{\"call\": \"{}\", \"dtype\": \"{}\", \"device\": \"{}\", \"gpu\": \"{}\", "
                                 "\"inference\": \"{}\", \"training\": \"{}\"}}",
                                 json_escaped(c.name), dtype, device, json_escaped(gpu), json_escaped(routes[0]),
                                 json_escaped(routes[1])));
    }
  }
  if (!json_path.empty()) {
    attn::io::write_file_atomically(json_path, fmt::format("[\n{}\n]\n", fmt::join(rows, ",\n")));
    fmt::print(stderr, "attn-bench: wrote {}\n", json_path);
  }
}

}  // namespace bench
