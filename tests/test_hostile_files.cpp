// Weight files from the internet face hostile input. Each broken or malicious file below must give a
// c10::Error (never a crash, hang or huge allocation), and a module it was loaded into must be unchanged.
// The files are made from real ones that PyTorch wrote (tests/reference/make_weights.py) by truncating,
// patching and randomising them.

#include "remove_tree.h"
#include "support.h"

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

namespace attn::test {
namespace {

namespace fs = std::filesystem;

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

class HostileFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("attn_hostile_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    torch::manual_seed(1);
    module_ = MultiHeadAttention(MultiHeadAttentionOptions(16, 4));
    for (const auto& p : module_->parameters()) before_.push_back(p.detach().clone());
  }
  void TearDown() override { remove_tree(dir_.string()); }

  /// Loads `bytes` as a weight file into the module and expects a clean error and an unchanged module.
  void expect_rejected(const std::string& bytes, const std::string& what, const std::string& needle = "attn::io") {
    SCOPED_TRACE(what);
    const std::string path = (dir_ / "file").string();
    std::ofstream(path, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    try {
      io::load_state_dict(*module_, path);
      ADD_FAILURE() << "accepted: " << what;
    } catch (const c10::Error& e) {
      EXPECT_NE(std::string(e.what_without_backtrace()).find(needle), std::string::npos) << e.what_without_backtrace();
    }
    const auto now = module_->parameters();
    for (size_t i = 0; i < now.size(); ++i) ASSERT_TRUE(torch::equal(now[i], before_[i])) << "module changed";
  }

  static std::string real(const std::string& suffix) {
    return slurp(std::string(ATTN_WEIGHTS_DIR) + "/mha_packed" + suffix);
  }

  fs::path dir_;
  MultiHeadAttention module_{nullptr};
  std::vector<torch::Tensor> before_;
};

TEST_F(HostileFiles, EveryTruncationIsRejected) {
  for (const char* suffix : {".zip.pt", ".legacy.pt", ".safetensors"}) {
    const std::string full = real(suffix);
    // Every prefix of the small files; a stride keeps it quick for the larger ones.
    const size_t step = std::max<size_t>(1, full.size() / 400);
    for (size_t n = 0; n < full.size(); n += step) {
      expect_rejected(full.substr(0, n), std::string(suffix) + " cut at " + std::to_string(n));
    }
  }
}

std::string safetensors_with_header(const std::string& json, const std::string& data) {
  std::string out(8, '\0');
  const uint64_t n = json.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  return out + json + data;
}

TEST_F(HostileFiles, SafetensorsHeaders) {
  const std::string data(64, '\0');
  expect_rejected(safetensors_with_header(R"({"x": {"dtype": "F32", "shape": [4], "data_offsets": [0, 4096]}})", data),
                  "offsets past the end", "lie outside the 64 bytes of data");
  expect_rejected(safetensors_with_header(R"({"x": {"dtype": "F32", "shape": [4], "data_offsets": [16, 0]}})", data),
                  "begin after end", "lie outside");
  expect_rejected(safetensors_with_header(R"({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},
                                              "b": {"dtype": "F32", "shape": [4], "data_offsets": [8, 24]}})",
                                          data),
                  "overlapping tensors", "overlap in the data");
  expect_rejected(safetensors_with_header(R"({"x": {"dtype": "F33", "shape": [4], "data_offsets": [0, 16]}})", data),
                  "unknown dtype", "unsupported dtype 'F33'");
  expect_rejected(safetensors_with_header(R"({"x": {"dtype": "F32", "shape": [4], "data_offsets": [0, 12]}})", data),
                  "size disagrees with the shape", "needs 16");
  expect_rejected(safetensors_with_header(
                      R"({"x": {"dtype": "F32", "shape": [4294967296, 4294967296, 4294967296], "data_offsets": [0, 16]}})",
                      data),
                  "shape that overflows", "overflows");
  expect_rejected(safetensors_with_header(R"({"x": {"dtype": "F32", "shape": [-4], "data_offsets": [0, 16]}})", data),
                  "negative dimension", "non-negative");
  expect_rejected(safetensors_with_header(R"({"x": 3})", data), "entry not an object", "not an object");
  expect_rejected(safetensors_with_header(R"({} )", data).replace(8, 1, "["), "header not an object",
                  "is not a weight file");
  expect_rejected(safetensors_with_header("{\"x\": {\"dtype\": \"F32\",", data), "invalid JSON", "not valid JSON");
  // A declared header length of 2^62: refused from the length alone, nothing is allocated for it.
  std::string huge = safetensors_with_header("{}", data);
  huge[7] = 0x40;
  expect_rejected(huge, "huge header length", "exceeds the");
  std::string past_end = safetensors_with_header("{}", "");
  past_end[0] = 100;
  expect_rejected(past_end, "header past the end", "runs past the end");
}

/// Replaces the first occurrence of `from` in `bytes` with `to` (same length).
std::string patched(std::string bytes, const std::string& from, const std::string& to) {
  const size_t at = bytes.find(from);
  EXPECT_NE(at, std::string::npos) << "pattern not found: " << from;
  if (at != std::string::npos) bytes.replace(at, from.size(), to);
  return bytes;
}

TEST_F(HostileFiles, TorchZipArchives) {
  const std::string zip = real(".zip.pt");
  // Renaming a storage record's path in the central directory and local header leaves data.pkl pointing at a
  // record the archive does not have.
  std::string renamed = zip;
  for (size_t at = renamed.find("/data/0"); at != std::string::npos; at = renamed.find("/data/0", at + 1)) {
    renamed[at + 6] = 'X';
  }
  expect_rejected(renamed, "missing storage record", "which the archive does not have");
  std::string no_pickle = zip;
  for (size_t at = no_pickle.find("data.pkl"); at != std::string::npos; at = no_pickle.find("data.pkl", at + 1)) {
    no_pickle[at] = 'x';
  }
  expect_rejected(no_pickle, "missing data.pkl", "no data.pkl record");
  // A pickle that names a global outside the allow-list.
  expect_rejected(patched(zip, "collections\nOrderedDict", "collections\nOrderedDicX"), "unknown global",
                  "refusing to load 'collections.OrderedDicX'");
  // A central directory that claims a record far larger than the file.
  std::string huge = zip;
  const size_t cd = huge.find("PK\x01\x02");
  ASSERT_NE(cd, std::string::npos);
  for (int i = 0; i < 4; ++i) huge[cd + 20 + i] = huge[cd + 24 + i] = static_cast<char>(0x7f);
  expect_rejected(huge, "record larger than the file", "bad zip archive");
}

TEST_F(HostileFiles, TorchLegacyStreams) {
  const std::string legacy = real(".legacy.pt");
  // in_proj_weight's storage count (768 elements, a little-endian int64 before its raw data) set to 2^60:
  // refused from the count alone, nothing is allocated for it.
  std::string huge_count = legacy;
  const std::string count_768("\x00\x03\x00\x00\x00\x00\x00\x00", 8);
  const size_t at = huge_count.rfind(count_768);
  ASSERT_NE(at, std::string::npos);
  huge_count.replace(at, 8, std::string("\x00\x00\x00\x00\x00\x00\x00\x10", 8));
  expect_rejected(huge_count, "storage count of 2^60", "but the file ends first");
  expect_rejected(legacy.substr(0, legacy.size() - 1), "last byte missing");
  expect_rejected(patched(legacy, "torch._utils", "torch._utilz"), "unknown module", "refusing to load");
  expect_rejected(patched(legacy, "FloatStorage", "EvilStorage\x0a"), "unknown storage class");
}

// Inputs the fuzzers (tests/fuzz) and a sanitizer review found, kept in tests/hostile/: a zip that made
// miniz read before the buffer, a pickle dict containing itself (a reference cycle: unbounded recursion), a
// storage offset of INT64_MIN, a stride-0 view asking for 4 GB from a 166-byte file, a tiny ZIP64 record,
// a 25-digit head index. Each must now be a clean rejection.
TEST_F(HostileFiles, FuzzerFindingsStayFixed) {
  for (const auto& entry : fs::directory_iterator(ATTN_HOSTILE_DIR)) {
    expect_rejected(slurp(entry.path().string()), entry.path().filename().string());
  }
  // 100000 nested tuples: refused at a fixed depth (freeing them recursively would overflow the stack).
  std::string deep = "\x80\x02K\x00" + std::string(100000, '\x85') + ".";
  expect_rejected(deep, "deeply nested tuples", "nested deeper than");
}

TEST_F(HostileFiles, RandomBytesAndRandomCorruption) {
  std::mt19937 gen(7);
  std::uniform_int_distribution<int> byte(0, 255);
  for (int i = 0; i < 200; ++i) {
    std::string noise(1 + gen() % 512, '\0');
    for (char& c : noise) c = static_cast<char>(byte(gen));
    expect_rejected(noise, "random bytes " + std::to_string(i));
  }
  // Real files with a few random bytes flipped: rejected or, if still well-formed, loaded; never a crash.
  for (const char* suffix : {".zip.pt", ".legacy.pt", ".safetensors"}) {
    const std::string full = real(suffix);
    for (int i = 0; i < 200; ++i) {
      std::string bytes = full;
      for (int j = 0; j < 3; ++j) bytes[gen() % bytes.size()] = static_cast<char>(byte(gen));
      const std::string path = (dir_ / "flipped").string();
      std::ofstream(path, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
      auto fresh = MultiHeadAttention(MultiHeadAttentionOptions(16, 4));
      try {
        io::load_state_dict(*fresh, path);
      } catch (const c10::Error&) {
        // a clean rejection
      }
    }
  }
}

}  // namespace
}  // namespace attn::test
