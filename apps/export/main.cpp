// attn-export: builds an attn module (seeded random weights, or weights from a file), exports it to
// TorchScript with attn::jit::to_torchscript and saves it, so that PyTorch or LibTorch can load and run it
// without attn (torch.jit.load). Public headers only, like the other apps.

#include <attn/attn.h>
#include <attn/io/files.h>
#include <attn/io/state_dict.h>
#include <attn/jit/export.h>

#include "app_main.h"
#include "command_line.h"

#include <fmt/core.h>
#include <fmt/format.h>
#include <torch/torch.h>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

using attn_apps::parse_integer;
using attn_apps::UsageError;

constexpr int64_t kMaxWidth = 1 << 20;
constexpr int64_t kMaxHeads = 4096;

constexpr const char* kUsage = R"(Usage: attn-export --module mha|head|cross --out FILE [OPTIONS]

Builds an attn module, exports it to TorchScript and saves it to FILE. The file needs no attn to run:
  Python:  m = torch.jit.load("FILE"); y = m(query, key, value, key_padding_mask=pad)
  C++:     auto m = torch::jit::load("FILE"); m.forward({query, key, value});
Its forward takes the module's inputs and masks (key_padding_mask, attend_mask, additive_mask) and returns
the output; its parameters carry the same names as the module's (q_proj.weight, ...).

Required:
  --module KIND       mha   attn::MultiHeadAttention
                      head  attn::AttentionHead
                      cross attn::CrossAttention
  --out FILE          where to save the TorchScript module (written to a temporary file, then renamed)

Sizes, --module mha:
  --embed-dim N       query and output width (default: 64)
  --heads N           number of heads (default: 4)
  --kv-heads N        key and value heads, shared by groups of query heads (grouped-query attention); it
                      must divide --heads (default: --heads)
  --head-dim N        width of each head (default: embed-dim / heads, which must divide evenly)
  --kdim N            key width (default: embed-dim)
  --vdim N            value width (default: embed-dim)
  --no-output-projection
                      no out_proj: the output is the heads concatenated
Sizes, --module head:
  --d-in N            input width (default: 16)
  --d-k N             query and key width (default: 24)
  --d-v N             value and output width (default: d-k)
Sizes, --module cross:
  --d-query N         width of the queries' input x (default: 64)
  --d-context N       width of the context (default: d-query)
  --d-k N             query and key width per head (default: 16)
  --d-v N             value width per head (default: d-k)
  --heads N           number of heads (default: 1)

Other options:
  --bias, --no-bias   biases in the projections (default: with for mha, without for head and cross)
  --causal            causal mask: a query sees only keys at or before its position (mha, head)
  --top-left          with --causal: query i sees keys j <= i even when Tq != Tk (default: bottom-right,
                      query i sees keys j <= i + Tk - Tq)
  --seed N            seed of the random initialisation, a non-negative integer (default: 0)
  --weights FILE      load the parameters from FILE (torch.save or safetensors; attn's names, those of
                      torch.nn.MultiheadAttention or of the notebooks' classes) instead
  --prefix P          with --weights: the module's tensors are those named P... in FILE, e.g. "model.self_attn."
                      for a checkpoint that holds a whole model (default: none)
  -h, --help          show this help and exit

Values may also be given as --option=VALUE.

Example:
  attn-export --module mha --embed-dim 32 --heads 4 --causal --out mha.pt
)";

struct ExportOptions {
  std::string module;
  std::string out;
  // mha
  std::optional<int64_t> embed_dim, kv_heads, head_dim, kdim, vdim;
  bool output_projection = true;
  // head / cross
  std::optional<int64_t> d_in, d_k, d_v, d_query, d_context;
  std::optional<int64_t> heads;
  std::optional<bool> bias;
  bool causal = false;
  bool top_left = false;
  uint64_t seed = 0;
  std::string weights;
  std::string prefix;  ///< of the module's tensors in the weights file
  std::vector<std::string> given;  // the size options given, to refuse those of another module kind
};

ExportOptions parse_args(int argc, char** argv) {
  ExportOptions o;
  attn_apps::CommandLine command_line;
  const auto add_size = [&](const std::string& name, std::optional<int64_t>& field, int64_t max) {
    command_line.add_option(name, [&o, &field, name, max](const std::string& value) {
      field = parse_integer<int64_t>(name, value, 1, max, fmt::format("an integer in 1..{}", max));
      o.given.push_back(name);
    });
  };
  command_line.add_option("--module", [&](const std::string& value) {
    if (value != "mha" && value != "head" && value != "cross")
      throw UsageError(fmt::format("--module expects mha, head or cross, got '{}'", value));
    o.module = value;
  });
  command_line.add_output_file_option("--out", o.out);
  add_size("--embed-dim", o.embed_dim, kMaxWidth);
  add_size("--kv-heads", o.kv_heads, kMaxHeads);
  add_size("--head-dim", o.head_dim, kMaxWidth);
  add_size("--kdim", o.kdim, kMaxWidth);
  add_size("--vdim", o.vdim, kMaxWidth);
  add_size("--d-in", o.d_in, kMaxWidth);
  add_size("--d-k", o.d_k, kMaxWidth);
  add_size("--d-v", o.d_v, kMaxWidth);
  add_size("--d-query", o.d_query, kMaxWidth);
  add_size("--d-context", o.d_context, kMaxWidth);
  add_size("--heads", o.heads, kMaxHeads);
  command_line.add_flag("--no-output-projection", [&] {
    o.output_projection = false;
    o.given.push_back("--no-output-projection");
  });
  command_line.add_flag("--bias", [&] { o.bias = true; });
  command_line.add_flag("--no-bias", [&] { o.bias = false; });
  command_line.add_flag("--causal", [&] { o.causal = true; });
  command_line.add_flag("--top-left", [&] { o.top_left = true; });
  command_line.add_option("--seed", [&](const std::string& value) {
    o.seed = parse_integer<uint64_t>("--seed", value, 0, UINT64_MAX, "a non-negative integer");
  });
  command_line.add_file_option("--weights", o.weights);
  command_line.add_option("--prefix", [&](const std::string& value) { o.prefix = value; });
  command_line.parse(argc, argv);
  if (!o.prefix.empty() && o.weights.empty()) throw UsageError("--prefix names tensors in --weights FILE; give --weights");
  if (o.module.empty()) throw UsageError("--module is required (mha, head or cross)");
  if (o.out.empty()) throw UsageError("--out is required");

  const std::vector<std::string> allowed =
      o.module == "mha"    ? std::vector<std::string>{"--embed-dim", "--heads", "--kv-heads", "--head-dim", "--kdim",
                                                      "--vdim", "--no-output-projection"}
      : o.module == "head" ? std::vector<std::string>{"--d-in", "--d-k", "--d-v"}
                           : std::vector<std::string>{"--d-query", "--d-context", "--d-k", "--d-v", "--heads"};
  for (const std::string& option : o.given) {
    if (std::find(allowed.begin(), allowed.end(), option) == allowed.end())
      throw UsageError(fmt::format("{} does not apply to --module {}", option, o.module));
  }
  if (o.causal && o.module == "cross") throw UsageError("--causal does not apply to --module cross");
  if (o.top_left && !o.causal) throw UsageError("--top-left needs --causal");
  if (o.module == "mha" && o.kv_heads && o.heads.value_or(4) % *o.kv_heads != 0) {
    throw UsageError(fmt::format("--kv-heads {} does not divide --heads {}: each key and value head serves an "
                                 "equal group of query heads", *o.kv_heads, o.heads.value_or(4)));
  }
  if (o.module == "mha" && !o.head_dim) {
    const int64_t embed = o.embed_dim.value_or(64), heads = o.heads.value_or(4);
    if (embed % heads != 0)
      throw UsageError(fmt::format("--embed-dim {} is not divisible by --heads {}; set --head-dim", embed, heads));
  }
  return o;
}

/// The exported module and what to say about it.
struct Exported {
  torch::jit::Module module;
  std::string description;  // the C++ module's pretty_print
};

template <typename Impl>
Exported export_module(Impl& module, const ExportOptions& o) {
  if (!o.weights.empty()) {
    try {
      attn::io::load_state_dict(module, o.weights, attn::io::LoadOptions().prefix(o.prefix));
    } catch (const c10::Error& e) {  // the library's hint names its C++ option; this app's is --prefix
      std::string message = e.what_without_backtrace();
      const std::string option = "LoadOptions().prefix(";
      for (size_t at; (at = message.find(option)) != std::string::npos;) {
        const size_t begin = at + option.size(), end = message.find(')', begin);
        if (end == std::string::npos) break;
        message.replace(at, end - at + 1, "--prefix " + message.substr(begin, end - begin));
      }
      throw std::runtime_error(message);
    }
  }
  module.eval();
  std::ostringstream description;
  module.pretty_print(description);
  return {attn::jit::to_torchscript(module), description.str()};
}

Exported build_and_export(const ExportOptions& o) {
  torch::manual_seed(o.seed);
  const auto alignment = o.top_left ? attn::CausalAlignment::TopLeft : attn::CausalAlignment::BottomRight;
  if (o.module == "mha") {
    const int64_t embed = o.embed_dim.value_or(64);
    auto options = attn::MultiHeadAttentionOptions(embed, o.heads.value_or(4))
                       .kdim(o.kdim.value_or(embed))
                       .vdim(o.vdim.value_or(embed))
                       .bias(o.bias.value_or(true))
                       .output_projection(o.output_projection)
                       .causal(o.causal)
                       .causal_alignment(alignment);
    if (o.head_dim) options.head_dim(*o.head_dim);
    if (o.kv_heads) options.num_kv_heads(*o.kv_heads);
    attn::MultiHeadAttention module(options);
    return export_module(*module, o);
  }
  if (o.module == "head") {
    const int64_t d_k = o.d_k.value_or(24);
    attn::AttentionHead module(attn::AttentionHeadOptions(o.d_in.value_or(16), d_k)
                                   .d_v(o.d_v.value_or(d_k))
                                   .bias(o.bias.value_or(false))
                                   .causal(o.causal)
                                   .causal_alignment(alignment));
    return export_module(*module, o);
  }
  const int64_t d_query = o.d_query.value_or(64), d_k = o.d_k.value_or(16);
  attn::CrossAttention module(attn::CrossAttentionOptions(d_query, o.d_context.value_or(d_query), d_k)
                                  .d_v(o.d_v.value_or(d_k))
                                  .num_heads(o.heads.value_or(1))
                                  .bias(o.bias.value_or(false)));
  return export_module(*module, o);
}

int run(const ExportOptions& o) {
  const Exported exported = build_and_export(o);
  std::ostringstream bytes;
  exported.module.save(bytes);
  attn::io::write_file_atomically(o.out, bytes.str());

  fmt::print("exported {}\n", exported.description);
  fmt::print("  weights: {}\n", o.weights.empty() ? fmt::format("random (seed {})", o.seed) : o.weights);
  int64_t values = 0, count = 0;
  for (const auto& p : exported.module.named_parameters()) {
    fmt::print("  {:<16} [{}]\n", p.name, fmt::join(p.value.sizes(), ", "));
    values += p.value.numel();
    ++count;
  }
  fmt::print("  {} parameters, {} values\n", count, values);
  std::ostringstream schema;
  schema << exported.module.get_method("forward").function().getSchema();
  fmt::print("  TorchScript class {}: {}\n", exported.module.type()->name()->qualifiedName(), schema.str());
  fmt::print("wrote {} ({} bytes)\n", o.out, bytes.str().size());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return attn_apps::run_main("attn-export", kUsage, [&] { return run(parse_args(argc, argv)); });
}
