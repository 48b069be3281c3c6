// Weights in and out: state_dicts that PyTorch wrote (tests/reference/make_weights.py) in the zip, legacy
// and safetensors formats, under torch.nn.MultiheadAttention's and the notebooks' names, loaded into our
// modules and run against PyTorch's own outputs; all-or-nothing errors; and files for Python to read back.

#include "remove_tree.h"
#include "support.h"

#include <attn/jit/export.h>

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <thread>

namespace attn::test {
namespace {

namespace fs = std::filesystem;

const char* const kFormats[] = {".zip.pt", ".legacy.pt", ".safetensors"};

/// The module a weights case describes (its options are in CASE.io.pt).
std::shared_ptr<torch::nn::Module> make_module(const ReferenceCase& c) {
  const std::string kind = c.text("module");
  if (kind == "head") {
    return AttentionHead(AttentionHeadOptions(c.integer("d_in"), c.integer("d_k")).d_v(c.integer("d_v")).bias(c.boolean("bias")))
        .ptr();
  }
  auto options = MultiHeadAttentionOptions(c.integer("embed_dim"), c.integer("num_heads"))
                     .kdim(c.integer("kdim"))
                     .vdim(c.integer("vdim"))
                     .bias(c.boolean("bias"));
  if (kind == "mha_concat") options.head_dim(c.integer("embed_dim")).output_projection(false);
  return MultiHeadAttention(options).ptr();
}

void load(torch::nn::Module& m, const std::string& path) {
  if (auto* mha = dynamic_cast<MultiHeadAttentionImpl*>(&m)) {
    io::load_state_dict(*mha, path);
    return;
  }
  if (auto* head = dynamic_cast<AttentionHeadImpl*>(&m)) {
    io::load_state_dict(*head, path);
    return;
  }
  FAIL() << "unexpected module";
}

torch::Tensor run(torch::nn::Module& m, const ReferenceCase& c) {
  torch::NoGradGuard no_grad;
  m.eval();
  const torch::Tensor q = c.tensor("query"), k = c.tensor("key"), v = c.tensor("value");
  if (auto* head = dynamic_cast<AttentionHeadImpl*>(&m)) return head->forward(q, k, v);
  AttentionMasks masks;
  if (c.has("key_padding_mask")) masks.key_padding_mask(c.tensor("key_padding_mask"));
  return dynamic_cast<MultiHeadAttentionImpl&>(m).forward(q, k, v, masks);
}

std::vector<std::string> weight_cases() {
  std::vector<std::string> out;
  for (const auto& name : reference_cases("", ATTN_WEIGHTS_DIR)) {
    for (const char* format : kFormats) out.push_back(name + format);
  }
  return out;
}

class PyTorchWeights : public ::testing::TestWithParam<std::string> {};

// PyTorch's trained model, saved by PyTorch, loaded by us: the same outputs as PyTorch computed.
TEST_P(PyTorchWeights, LoadIntoOurModuleAndMatchPyTorch) {
  const std::string file = GetParam();
  const std::string name = file.substr(0, file.find('.'));
  const ReferenceCase c(name + ".io", ATTN_WEIGHTS_DIR);
  auto module = make_module(c);
  load(*module, std::string(ATTN_WEIGHTS_DIR) + "/" + file);
  EXPECT_CLOSE(run(*module, c), c.tensor("expected"), tolerance(torch::kFloat32));
}

std::string file_name(const ::testing::TestParamInfo<std::string>& info) {
  std::string s = info.param;
  for (char& ch : s) {
    if (!isalnum(static_cast<unsigned char>(ch))) ch = '_';
  }
  return s;
}

INSTANTIATE_TEST_SUITE_P(Files, PyTorchWeights, ::testing::ValuesIn(weight_cases()), file_name);

TEST(WeightFiles, AllThreeFormatsHoldTheSameTensors) {
  const std::string base = std::string(ATTN_WEIGHTS_DIR) + "/mha_packed";
  const auto zip = io::read_tensors(base + ".zip.pt");
  const auto legacy = io::read_tensors(base + ".legacy.pt");
  const auto safetensors = io::read_tensors(base + ".safetensors");
  ASSERT_EQ(zip.size(), 4u);  // in_proj_weight, in_proj_bias, out_proj.weight, out_proj.bias
  for (const auto& [name, t] : zip) {
    SCOPED_TRACE(name);
    ASSERT_TRUE(legacy.count(name) && safetensors.count(name));
    EXPECT_TRUE(torch::equal(t, legacy.at(name)));
    EXPECT_TRUE(torch::equal(t, safetensors.at(name)));
  }
}

/// Every parameter of `m`, cloned, to check that a failed load left them untouched.
std::vector<torch::Tensor> snapshot(const torch::nn::Module& m) {
  std::vector<torch::Tensor> out;
  for (const auto& p : m.parameters()) out.push_back(p.detach().clone());
  return out;
}

void expect_unchanged(const torch::nn::Module& m, const std::vector<torch::Tensor>& before) {
  const auto now = m.parameters();
  ASSERT_EQ(now.size(), before.size());
  for (size_t i = 0; i < now.size(); ++i) EXPECT_TRUE(torch::equal(now[i], before[i])) << "parameter " << i;
}

TEST(WeightFiles, MismatchListsEverythingAndLeavesTheModuleUnchanged) {
  const std::string packed = std::string(ATTN_WEIGHTS_DIR) + "/mha_packed.zip.pt";
  {
    auto wrong_width = MultiHeadAttention(MultiHeadAttentionOptions(8, 2));
    const auto before = snapshot(*wrong_width);
    EXPECT_ERROR_CONTAINS(io::load_state_dict(*wrong_width, packed), "Mis-shaped: ");
    // The packed in_proj tensors, whose rows do not split into this module's q, k and v, are named as mis-shaped
    // against the three they stand for, not listed as unexpected with q, k and v missing.
    EXPECT_ERROR_CONTAINS(io::load_state_dict(*wrong_width, packed),
                          "in_proj_weight (file [48, 16], module [24, 8] for q_proj.weight + k_proj.weight + "
                          "v_proj.weight)");
    EXPECT_ERROR_CONTAINS(io::load_state_dict(*wrong_width, packed), "in_proj_bias (file [48], module [24] for ");
    try {
      io::load_state_dict(*wrong_width, packed);
      ADD_FAILURE() << "a 16-wide file loaded into an 8-wide module";
    } catch (const c10::Error& error) {
      const std::string message = error.what_without_backtrace();
      EXPECT_EQ(message.find("Missing:"), std::string::npos) << message;
      EXPECT_EQ(message.find("Unexpected:"), std::string::npos) << message;
    }
    EXPECT_ERROR_CONTAINS(io::load_state_dict(*wrong_width, packed), "the module is unchanged");
    expect_unchanged(*wrong_width, before);
  }
  {
    auto no_bias = MultiHeadAttention(MultiHeadAttentionOptions(16, 4).bias(false));
    const auto before = snapshot(*no_bias);
    EXPECT_ERROR_CONTAINS(io::load_state_dict(*no_bias, packed),
                          "Unexpected: in_proj_bias, out_proj.bias.");
    expect_unchanged(*no_bias, before);
  }
  {
    auto mha = MultiHeadAttention(MultiHeadAttentionOptions(3, 1).bias(false));
    const auto before = snapshot(*mha);
    EXPECT_ERROR_CONTAINS(io::load_state_dict(*mha, std::string(ATTN_WEIGHTS_DIR) + "/nb001_head.safetensors"),
                          "Missing: out_proj.weight.");
    expect_unchanged(*mha, before);
  }
}

TEST(WeightFiles, UnreadableFilesGetAClearError) {
  const fs::path dir = fs::temp_directory_path() / "attn_io_errors";
  fs::create_directories(dir);
  const auto write = [&](const std::string& name, const std::string& bytes) {
    std::ofstream(dir / name, std::ios::binary) << bytes;
    return (dir / name).string();
  };
  auto mha = MultiHeadAttention(MultiHeadAttentionOptions(16, 4));
  EXPECT_ERROR_CONTAINS(io::load_state_dict(*mha, (dir / "absent.pt").string()), "cannot open");
  EXPECT_ERROR_CONTAINS(io::load_state_dict(*mha, write("text.pt", "hello, world")),
                        "is not a weight file attn can read");
  // A pickle that would call os.system: refused by name, nothing runs.
  EXPECT_ERROR_CONTAINS(io::read_tensors(write("evil.pt", std::string("\x80\x02" "cos\nsystem\n", 13)),
                                         io::WeightFormat::TorchLegacy),
                        "refusing to load 'os.system'");
}

TEST(WeightFiles, SaveAndLoadRoundTripInBothFormats) {
  const fs::path dir = fs::temp_directory_path() / "attn_io_round_trip";
  fs::create_directories(dir);
  torch::manual_seed(4);
  auto source = MultiHeadAttention(MultiHeadAttentionOptions(12, 3).kdim(10).vdim(6));
  const torch::Tensor q = torch::randn({2, 5, 12}), k = torch::randn({2, 7, 10}), v = torch::randn({2, 7, 6});
  const torch::Tensor expected = source(q, k, v);
  for (const auto format : {io::WeightFormat::TorchZip, io::WeightFormat::Safetensors}) {
    for (const auto names : {io::WeightNames::Attn, io::WeightNames::TorchMultiheadAttention}) {
      const std::string path = (dir / "mha.bin").string();
      io::save_state_dict(*source, path, io::SaveOptions().format(format).names(names));
      auto target = MultiHeadAttention(MultiHeadAttentionOptions(12, 3).kdim(10).vdim(6));
      io::load_state_dict(*target, path);
      EXPECT_TRUE(torch::equal(target(q, k, v), expected));
    }
  }
  auto head = AttentionHead(AttentionHeadOptions(5, 4).d_v(3));
  EXPECT_ERROR_CONTAINS(io::save_state_dict(*head, (dir / "h.pt").string(),
                                            io::SaveOptions().names(io::WeightNames::TorchMultiheadAttention)),
                        "saves under attn's names only");
  EXPECT_ERROR_CONTAINS(io::save_state_dict(*head, (dir / "h.pt").string(),
                                            io::SaveOptions().format(io::WeightFormat::TorchLegacy)),
                        "cannot write the torch legacy format");
}

// A decoder's attention block (Llama, Mistral, Qwen, SmolLM in transformers): q/k/v/o_proj, narrower k/v.
TEST(WeightFiles, DecoderNamesLoadIntoGroupedQueryAttention) {
  const fs::path dir = fs::temp_directory_path() / "attn_io_decoder";
  fs::create_directories(dir);
  torch::manual_seed(6);
  const std::map<std::string, torch::Tensor> tensors = {{"q_proj.weight", torch::randn({24, 24})},
                                                        {"k_proj.weight", torch::randn({8, 24})},
                                                        {"v_proj.weight", torch::randn({8, 24})},
                                                        {"o_proj.weight", torch::randn({24, 24})}};
  const std::string path = (dir / "block.safetensors").string();
  io::write_tensors(path, tensors, io::WeightFormat::Safetensors);
  auto mha = MultiHeadAttention(MultiHeadAttentionOptions(24, 6).num_kv_heads(2).bias(false));
  io::load_state_dict(*mha, path);
  EXPECT_TRUE(torch::equal(mha->k_proj->weight, tensors.at("k_proj.weight")));
  EXPECT_TRUE(torch::equal(mha->out_proj->weight, tensors.at("o_proj.weight")));
  // The same file does not fit a module whose K/V heads differ: a shape mismatch, named.
  auto full = MultiHeadAttention(MultiHeadAttentionOptions(24, 6).bias(false));
  EXPECT_ERROR_CONTAINS(io::load_state_dict(*full, path), "k_proj.weight");
}

TEST(WeightFiles, AtomicWriteReplacesTheFileOrLeavesItUntouched) {
  const fs::path dir = fs::temp_directory_path() / "attn_io_atomic";
  remove_tree(dir.string());
  fs::create_directories(dir);
  const std::string path = (dir / "out.txt").string();
  const auto contents = [&] {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  io::write_file_atomically(path, "first");
  io::write_file_atomically(path, "second");
  EXPECT_EQ(contents(), "second");
  // A write that fails (here the file-size limit, as a full disk would) leaves the previous file as it was and
  // no temporary file.
  {
    rlimit before{};
    ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &before), 0);
    const auto previous_handler = std::signal(SIGXFSZ, SIG_IGN);
    rlimit small = before;
    small.rlim_cur = 4;
    ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &small), 0);
    EXPECT_ERROR_CONTAINS(io::write_file_atomically(path, "longer than four bytes"), "File too large");
    setrlimit(RLIMIT_FSIZE, &before);
    std::signal(SIGXFSZ, previous_handler);
  }
  EXPECT_EQ(contents(), "second");
  // rename() cannot replace a directory: the error names the system's reason, and no temporary file stays.
  fs::create_directory(dir / "a_directory");
  EXPECT_ERROR_CONTAINS(io::write_file_atomically((dir / "a_directory").string(), "x"), "Is a directory");
  EXPECT_EQ(std::distance(fs::directory_iterator(dir), fs::directory_iterator()), 2);  // out.txt, a_directory
}

TEST(WeightFiles, AtomicWriteKeepsPermissionsLinksAndOtherFiles) {
  const fs::path dir = fs::temp_directory_path() / ("attn_io_atomic_kept_" + std::to_string(getpid()));
  remove_tree(dir.string());
  fs::create_directories(dir);
  const auto read = [](const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  // A private file stays private.
  const fs::path secret = dir / "private.pt";
  io::write_file_atomically(secret.string(), "one");
  fs::permissions(secret, fs::perms::owner_read | fs::perms::owner_write);
  io::write_file_atomically(secret.string(), "two");
  EXPECT_EQ(fs::status(secret).permissions(), fs::perms::owner_read | fs::perms::owner_write);
  EXPECT_EQ(read(secret), "two");
  // A symbolic link stays a link; its target gets the new contents.
  const fs::path link = dir / "latest.pt";
  fs::create_symlink(secret.filename(), link);
  io::write_file_atomically(link.string(), "three");
  EXPECT_TRUE(fs::is_symlink(link));
  EXPECT_EQ(read(secret), "three");
  // A file of the user's that happens to have a temporary-looking name is neither overwritten nor removed.
  const fs::path lookalike = secret.string() + ".tmp." + std::to_string(getpid());
  std::ofstream(lookalike) << "mine";
  io::write_file_atomically(secret.string(), "four");
  EXPECT_EQ(read(lookalike), "mine");
  // A FIFO (like a device such as /dev/null) is written where it is, not replaced by a regular file. The
  // reader opens it first without blocking, so that a write that wrongly renamed over it fails here, not hangs.
  const fs::path fifo = dir / "pipe";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  const int reader = ::open(fifo.c_str(), O_RDONLY | O_NONBLOCK);
  ASSERT_GE(reader, 0);
  io::write_file_atomically(fifo.string(), "through the pipe");
  char received[64] = {};
  const ssize_t n = ::read(reader, received, sizeof received);
  ::close(reader);
  EXPECT_EQ(std::string(received, n > 0 ? static_cast<size_t>(n) : 0), "through the pipe");
  EXPECT_TRUE(fs::is_fifo(fifo));
  // Threads writing one path at once each write whole; the file ends as one of them wrote it.
  const fs::path shared = dir / "shared.pt";
  std::vector<std::thread> writers;
  std::atomic<int> failures{0};
  for (int t = 0; t < 4; ++t) {
    writers.emplace_back([&, t] {
      for (int i = 0; i < 25; ++i) {
        try {
          io::write_file_atomically(shared.string(), std::string(1000, static_cast<char>('a' + t)));
        } catch (const c10::Error&) {
          ++failures;
        }
      }
    });
  }
  for (std::thread& w : writers) w.join();
  EXPECT_EQ(failures.load(), 0);
  const std::string last = read(shared);
  EXPECT_TRUE(last == std::string(1000, last.empty() ? '?' : last[0]) && last[0] >= 'a' && last[0] <= 'd');
  // Five files (private.pt, latest.pt, the lookalike, the pipe, shared.pt): no temporary file stays.
  EXPECT_EQ(std::distance(fs::directory_iterator(dir), fs::directory_iterator()), 5);
  remove_tree(dir.string());
}

// Writes, for tests/python/test_weights_from_cpp.py: our MultiHeadAttention's weights under
// torch.nn.MultiheadAttention's names (zip and safetensors), its inputs and our outputs.
// ---- real checkpoints: prefixes, nested keys, non-tensor entries, non-strict loads, tensors in memory

std::string weights_file(const std::string& name) { return std::string(ATTN_WEIGHTS_DIR) + "/" + name; }

/// The self-attention of the nn.TransformerEncoderLayer that make_weights.py trained, run on its input.
torch::Tensor encoder_self_attention(MultiHeadAttentionImpl& mha, const ReferenceCase& io) {
  torch::NoGradGuard no_grad;
  mha.eval();
  const torch::Tensor x = io.tensor("query");
  return mha.forward(x, x, x);
}

TEST(Checkpoints, PrefixLoadsTheAttentionOfATransformerEncoderLayer) {
  const ReferenceCase io("encoder_layer.io", ATTN_WEIGHTS_DIR);
  auto mha = MultiHeadAttention(MultiHeadAttentionOptions(16, 4));
  const io::LoadResult result =
      io::load_state_dict(*mha, weights_file("encoder_layer.zip.pt"), io::LoadOptions().prefix("self_attn."));
  EXPECT_TRUE(result.missing.empty() && result.unexpected.empty() && result.skipped.empty());
  EXPECT_CLOSE(encoder_self_attention(*mha, io), io.tensor("expected"), 1e-5);
}

TEST(Checkpoints, WithoutThePrefixTheErrorNamesIt) {
  auto mha = MultiHeadAttention(MultiHeadAttentionOptions(16, 4));
  const auto before = snapshot(*mha);
  EXPECT_ERROR_CONTAINS(io::load_state_dict(*mha, weights_file("encoder_layer.zip.pt")),
                        "pass LoadOptions().prefix(\"self_attn.\")");
  expect_unchanged(*mha, before);
  EXPECT_ERROR_CONTAINS(io::load_state_dict(*mha, weights_file("encoder_layer.zip.pt"), io::LoadOptions().prefix("attn.")),
                        "no tensor under the prefix 'attn.'; its names start with: ");
  expect_unchanged(*mha, before);
  // A module with a parameter that the file lacks (here sinks): the prefix that holds the rest, and what is not
  // there.
  auto with_sinks = MultiHeadAttention(MultiHeadAttentionOptions(16, 4).sinks(true));
  EXPECT_ERROR_CONTAINS(io::load_state_dict(*with_sinks, weights_file("encoder_layer.zip.pt")),
                        "Most of the module's weights are under the prefix 'self_attn.'; the file has no sinks there");
}

// {"model": state_dict, "step": 5, "name": "run-1", "lr": 0.1, "history": [...]}, in both torch.save formats.
TEST(Checkpoints, NestedCheckpointReadsUnderAKeyAndSkipsWhatIsNotATensor) {
  const ReferenceCase io("encoder_layer.io", ATTN_WEIGHTS_DIR);
  const std::vector<std::string> skipped = {"step (int)", "name (str)", "lr (float)", "history (list)"};
  for (const char* file : {"checkpoint.zip.pt", "checkpoint.legacy.pt"}) {
    SCOPED_TRACE(file);
    const io::TensorFile whole = io::read_tensor_file(weights_file(file));
    EXPECT_EQ(whole.skipped, skipped);
    EXPECT_EQ(whole.tensors.count("model.self_attn.in_proj_weight"), 1u);

    const io::TensorFile model = io::read_tensor_file(weights_file(file), io::ReadOptions().key("model"));
    EXPECT_TRUE(model.skipped.empty());
    EXPECT_EQ(model.tensors.size(), whole.tensors.size());
    EXPECT_TRUE(torch::equal(model.tensors.at("self_attn.in_proj_weight"),
                             whole.tensors.at("model.self_attn.in_proj_weight")));
    EXPECT_ERROR_CONTAINS(io::read_tensors(weights_file(file), io::ReadOptions().key("optimizer")),
                          "no tensor under the key 'optimizer'; its top-level keys: model, step, name, lr, history");

    auto mha = MultiHeadAttention(MultiHeadAttentionOptions(16, 4));
    const io::LoadResult result =
        io::load_state_dict(*mha, weights_file(file), io::LoadOptions().prefix("model.self_attn."));
    EXPECT_EQ(result.skipped, skipped);
    EXPECT_CLOSE(encoder_self_attention(*mha, io), io.tensor("expected"), 1e-5);
  }
}

TEST(Checkpoints, NonStrictLoadListsWhatItIgnoredAndKeepsTheRest) {
  // The file's out_proj has no place in a module without an output projection: ignored, and listed.
  auto no_out = MultiHeadAttention(MultiHeadAttentionOptions(16, 4).output_projection(false));
  const auto result = io::load_state_dict(*no_out, weights_file("encoder_layer.zip.pt"),
                                          io::LoadOptions().prefix("self_attn.").strict(false));
  EXPECT_EQ(result.unexpected, (std::vector<std::string>{"out_proj.bias", "out_proj.weight"}));
  EXPECT_TRUE(result.missing.empty());
  const torch::Tensor in_proj = io::read_tensors(weights_file("encoder_layer.zip.pt")).at("self_attn.in_proj_weight");
  EXPECT_TRUE(torch::equal(no_out->q_proj->weight, in_proj.narrow(0, 0, 16)));

  // Strict, the same load is refused and changes nothing.
  auto strict = MultiHeadAttention(MultiHeadAttentionOptions(16, 4).output_projection(false));
  const auto before = snapshot(*strict);
  EXPECT_ERROR_CONTAINS(io::load_state_dict(*strict, weights_file("encoder_layer.zip.pt"),
                                            io::LoadOptions().prefix("self_attn.")),
                        "Unexpected: out_proj.bias, out_proj.weight.");
  expect_unchanged(*strict, before);

  // Mis-shaped is an error even when not strict.
  auto narrow = MultiHeadAttention(MultiHeadAttentionOptions(8, 2));
  const auto narrow_before = snapshot(*narrow);
  EXPECT_ERROR_CONTAINS(io::load_state_dict(*narrow, weights_file("encoder_layer.zip.pt"),
                                            io::LoadOptions().prefix("self_attn.").strict(false)),
                        "Mis-shaped: ");
  expect_unchanged(*narrow, narrow_before);
}

TEST(Checkpoints, LoadsFromTensorsInMemoryWithoutTouchingThem) {
  const ReferenceCase io("encoder_layer.io", ATTN_WEIGHTS_DIR);
  std::map<std::string, torch::Tensor> tensors = io::read_tensors(weights_file("encoder_layer.zip.pt"));
  for (auto& [name, t] : tensors) t = t.to(torch::kFloat64);  // another dtype than the module's
  std::map<std::string, torch::Tensor> copies;
  for (const auto& [name, t] : tensors) copies[name] = t.clone();

  auto mha = MultiHeadAttention(MultiHeadAttentionOptions(16, 4));
  io::load_state_dict(*mha, tensors, io::LoadOptions().prefix("self_attn."));
  EXPECT_CLOSE(encoder_self_attention(*mha, io), io.tensor("expected"), 1e-5);
  for (const auto& [name, t] : tensors) EXPECT_TRUE(torch::equal(t, copies.at(name))) << name;

  // Without the biases, non-strict: they keep their values and are listed as missing.
  std::map<std::string, torch::Tensor> weights_only = {{"q_proj.weight", torch::ones({16, 16})},
                                                       {"k_proj.weight", torch::ones({16, 16})},
                                                       {"v_proj.weight", torch::ones({16, 16})},
                                                       {"out_proj.weight", torch::ones({16, 16})}};
  const torch::Tensor bias_before = mha->q_proj->bias.clone();
  const auto result = io::load_state_dict(*mha, weights_only, io::LoadOptions().strict(false));
  EXPECT_EQ(result.missing, (std::vector<std::string>{"k_proj.bias", "out_proj.bias", "q_proj.bias", "v_proj.bias"}));
  EXPECT_TRUE(torch::equal(mha->q_proj->bias, bias_before));
  EXPECT_TRUE(torch::equal(mha->q_proj->weight, torch::ones({16, 16})));
  EXPECT_ERROR_CONTAINS(io::load_state_dict(*mha, weights_only), "the tensor map does not fit");
}

// Refusals found before any parameter changes: a tensor that holds no values (meta) or is not dense, and two
// tensors that name one parameter.
TEST(Checkpoints, TensorsThatCannotLoadLeaveTheModuleUnchanged) {
  auto mha = MultiHeadAttention(MultiHeadAttentionOptions(8, 2));
  std::map<std::string, torch::Tensor> before;
  for (const auto& p : mha->named_parameters()) before[p.key()] = p.value().detach().clone();
  std::map<std::string, torch::Tensor> good;
  for (const auto& [name, t] : before) good[name] = torch::full_like(t, 0.5);
  const auto unchanged = [&] {
    for (const auto& p : mha->named_parameters()) EXPECT_TRUE(torch::equal(p.value(), before.at(p.key()))) << p.key();
  };
  auto meta = good;
  meta["v_proj.weight"] = torch::empty({8, 8}, torch::TensorOptions().device(torch::kMeta));
  EXPECT_ERROR_CONTAINS(io::load_state_dict(*mha, meta), "v_proj.weight (a meta tensor");
  unchanged();
  auto sparse = good;
  sparse["v_proj.weight"] = good["v_proj.weight"].to_sparse();
  EXPECT_ERROR_CONTAINS(io::load_state_dict(*mha, sparse), "v_proj.weight (a Sparse tensor");
  unchanged();
  auto twice = good;
  twice["W_q.weight"] = torch::ones({8, 8});  // the notebooks' name for q_proj.weight, which is there too
  EXPECT_ERROR_CONTAINS(io::load_state_dict(*mha, twice), "'W_q.weight' and 'q_proj.weight' both give the module's "
                        "q_proj.weight");
  unchanged();
  io::load_state_dict(*mha, good);  // and the good map loads
  EXPECT_TRUE(torch::equal(mha->v_proj->weight, good["v_proj.weight"]));
}

// torch.nn.MultiheadAttention's names hold neither grouped K/V heads (PyTorch could not load the file) nor a
// rotary embedding (PyTorch would load the weights and compute without it).
TEST(WeightFiles, TorchNamesRefuseWhatTorchMultiheadAttentionLacks) {
  const auto torch_names = io::SaveOptions().names(io::WeightNames::TorchMultiheadAttention);
  auto grouped = MultiHeadAttention(MultiHeadAttentionOptions(8, 4).num_kv_heads(2));
  EXPECT_ERROR_CONTAINS(io::save_state_dict(*grouped, "/nonexistent/never-written.pt", torch_names),
                        "num_kv_heads=2 of num_heads=4");
  auto rotary = MultiHeadAttention(MultiHeadAttentionOptions(8, 2).rotary(RotaryEmbeddingOptions(4)));
  EXPECT_ERROR_CONTAINS(io::save_state_dict(*rotary, "/nonexistent/never-written.pt", torch_names), "rotary=1");
}

TEST(Checkpoints, TorchScriptArchivesAndPickledModulesGetTheirOwnErrors) {
  auto mha = MultiHeadAttention(MultiHeadAttentionOptions(4, 1));
  EXPECT_ERROR_CONTAINS(io::load_state_dict(*mha, weights_file("torchscript.pt")),
                        "is a TorchScript archive (torch.jit.save)");
  EXPECT_ERROR_CONTAINS(io::read_tensors(weights_file("torchscript.pt")), "torch::jit::load");
  EXPECT_ERROR_CONTAINS(io::load_state_dict(*mha, weights_file("pickled_module.pt")),
                        "holds a pickled Python object");
  EXPECT_ERROR_CONTAINS(io::read_tensors(weights_file("pickled_module.pt")), "torch.save(model.state_dict(), path)");
  // attn's own export, whose code records are deflated to less than their size (the check of each record's extent
  // once read the uncompressed size, and called the archive a bad zip instead).
  const fs::path exported = fs::temp_directory_path() / ("attn_io_exported_" + std::to_string(getpid()) + ".pt");
  jit::to_torchscript(*mha).save(exported.string());
  EXPECT_ERROR_CONTAINS(io::load_state_dict(*mha, exported.string()), "is a TorchScript archive (torch.jit.save)");
  fs::remove(exported);
}

TEST(IoForPython, WritesWeights) {
  fs::create_directories(ATTN_IO_OUT_DIR);
  struct Config {
    const char* name;
    int64_t embed, heads, kdim, vdim;
    bool bias;
  };
  for (const Config& cfg : {Config{"packed", 16, 4, 16, 16, true}, Config{"kdim_vdim", 12, 3, 10, 6, false}}) {
    torch::manual_seed(9);
    auto mha = MultiHeadAttention(
        MultiHeadAttentionOptions(cfg.embed, cfg.heads).kdim(cfg.kdim).vdim(cfg.vdim).bias(cfg.bias));
    mha->eval();
    const torch::Tensor q = torch::randn({2, 5, cfg.embed}), k = torch::randn({2, 7, cfg.kdim}),
                        v = torch::randn({2, 7, cfg.vdim});
    torch::Tensor padding = torch::rand({2, 7}) < 0.3;
    padding.index_put_({torch::indexing::Slice(), 0}, false);
    const torch::Tensor out = mha(q, k, v, AttentionMasks().key_padding_mask(padding));
    const std::string base = std::string(ATTN_IO_OUT_DIR) + "/mha_" + cfg.name;
    const auto torch_names = io::SaveOptions().names(io::WeightNames::TorchMultiheadAttention);
    io::save_state_dict(*mha, base + ".zip.pt", io::SaveOptions(torch_names).format(io::WeightFormat::TorchZip));
    io::save_state_dict(*mha, base + ".safetensors",
                        io::SaveOptions(torch_names).format(io::WeightFormat::Safetensors));
    c10::impl::GenericDict io_case(c10::StringType::get(), c10::AnyType::get());
    io_case.insert("embed_dim", cfg.embed);
    io_case.insert("num_heads", cfg.heads);
    io_case.insert("kdim", cfg.kdim);
    io_case.insert("vdim", cfg.vdim);
    io_case.insert("bias", cfg.bias);
    io_case.insert("query", q);
    io_case.insert("key", k);
    io_case.insert("value", v);
    io_case.insert("key_padding_mask", padding);
    io_case.insert("expected", out.detach());
    const std::vector<char> bytes = torch::pickle_save(io_case);
    std::ofstream(base + ".io.pt", std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }
}

}  // namespace
}  // namespace attn::test
