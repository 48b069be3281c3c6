// Ring attention across processes: each test starts N ranks of this same executable (--ring-worker), which
// meet through a FileStore in a fresh temporary directory and talk over Gloo on loopback. The test waits for
// them with a deadline, kills any that remain, and removes the directory.

#include "ring_worker.h"
#include "../remove_tree.h"

#include <attn/distributed/gloo.h>
#include <attn/distributed/ring_attention.h>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace attn::test::ring {
namespace {

namespace dist = attn::distributed;

// readlink(2), not std::filesystem: see remove_tree.h.
std::string self_path() {
  char buffer[4096];
  const ssize_t n = ::readlink("/proc/self/exe", buffer, sizeof buffer - 1);
  return n > 0 ? std::string(buffer, static_cast<size_t>(n)) : std::string("/proc/self/exe");
}

struct RankResult {
  int exit_code = -1;  ///< -1: killed by a signal or by the deadline
  int signal = 0;
  std::string output;
};

/// Starts ranks `ranks` of a `world`-rank run of `name`, waits up to `deadline`, returns each rank's result.
std::vector<RankResult> run_ranks(const std::string& name, int world, const std::vector<int>& ranks,
                                  std::chrono::milliseconds timeout, std::chrono::seconds deadline) {
  char pattern[] = "/tmp/attn-ring-XXXXXX";
  const char* dir = mkdtemp(pattern);
  EXPECT_NE(dir, nullptr);
  const std::string store = std::string(dir) + "/store";  // unique per run: no stale rendezvous file
  std::vector<pid_t> pids;
  std::vector<std::string> logs;
  for (int rank : ranks) {
    const std::string log = std::string(dir) + "/rank" + std::to_string(rank) + ".log";
    logs.push_back(log);
    const std::vector<std::string> args = {self_path(), "--ring-worker", name, std::to_string(rank),
                                           std::to_string(world), store, std::to_string(timeout.count())};
    std::vector<char*> argv;
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_adddup2(&actions, 1, 2);
    pid_t pid = 0;
    const int rc = posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    EXPECT_EQ(rc, 0) << "posix_spawn failed";
    pids.push_back(rc == 0 ? pid : -1);
  }
  std::vector<RankResult> results(ranks.size());
  std::vector<bool> done(ranks.size(), false);
  const auto end = std::chrono::steady_clock::now() + deadline;
  size_t remaining = ranks.size();
  while (remaining > 0 && std::chrono::steady_clock::now() < end) {
    for (size_t i = 0; i < pids.size(); ++i) {
      if (done[i]) continue;
      int status = 0;
      if (pids[i] < 0 || waitpid(pids[i], &status, WNOHANG) == pids[i]) {
        done[i] = true;
        --remaining;
        if (pids[i] >= 0 && WIFEXITED(status)) results[i].exit_code = WEXITSTATUS(status);
        if (pids[i] >= 0 && WIFSIGNALED(status)) results[i].signal = WTERMSIG(status);
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  for (size_t i = 0; i < pids.size(); ++i) {  // past the deadline: a hang; kill and reap
    if (done[i]) continue;
    kill(pids[i], SIGKILL);
    waitpid(pids[i], nullptr, 0);
    results[i].output = "(killed at the test's deadline)\n";
  }
  for (size_t i = 0; i < logs.size(); ++i) {
    std::ifstream in(logs[i]);
    std::stringstream s;
    s << in.rdbuf();
    results[i].output += s.str();
  }
  attn::test::remove_tree(dir);
  return results;
}

std::string describe(const std::vector<RankResult>& results) {
  std::ostringstream s;
  for (size_t i = 0; i < results.size(); ++i) {
    s << "[rank process " << i << ": exit " << results[i].exit_code;
    if (results[i].signal) s << ", signal " << results[i].signal;
    s << "]\n" << results[i].output;
  }
  return s.str();
}

std::vector<int> all_ranks(int world) {
  std::vector<int> ranks;
  for (int r = 0; r < world; ++r) ranks.push_back(r);
  return ranks;
}

struct ParityCase {
  const char* label;
  int world;
  const char* spec;
};

// gtest prints a parameter in the test's listing (and ctest's names): the label, not the struct's bytes.
void PrintTo(const ParityCase& c, std::ostream* os) { *os << c.label; }

class RingParity : public ::testing::TestWithParam<ParityCase> {};

TEST_P(RingParity, OutputLseAndGradientsMatchOneProcess) {
  ASSERT_TRUE(dist::gloo_available()) << "attn was built without Gloo's headers (libgloo-dev)";
  const ParityCase& c = GetParam();
  const auto results = run_ranks(c.spec, c.world, all_ranks(c.world), std::chrono::seconds(30), std::chrono::seconds(100));
  for (const RankResult& r : results) EXPECT_EQ(r.exit_code, kExitPass) << describe(results);
  std::cout << describe(results);
}

// T is never a multiple of 2N: the shards differ in length.
INSTANTIATE_TEST_SUITE_P(
    Ranks, RingParity,
    ::testing::Values(
        ParityCase{"N1_causal_zigzag", 1, "causal=1:layout=zigzag:T=37"},
        ParityCase{"N2_full", 2, "causal=0:T=37"},
        ParityCase{"N2_causal_contiguous", 2, "causal=1:layout=contiguous:T=37"},
        ParityCase{"N2_causal_zigzag", 2, "causal=1:layout=zigzag:T=37"},
        ParityCase{"N2_causal_zigzag_gqa_padding_scale", 2, "causal=1:T=41:H=6:Hkv=2:pad=1:scale=0.3"},
        ParityCase{"N2_causal_zigzag_float64_gqa", 2, "dtype=float64:causal=1:T=39:H=4:Hkv=1"},
        ParityCase{"N2_causal_zigzag_bfloat16", 2, "dtype=bfloat16:causal=1:T=37"},
        ParityCase{"N4_causal_zigzag", 4, "causal=1:layout=zigzag:T=45"},
        ParityCase{"N4_causal_contiguous_float64", 4, "dtype=float64:causal=1:layout=contiguous:T=45"},
        ParityCase{"N4_full_gqa_padding", 4, "causal=0:T=43:H=4:Hkv=2:pad=1"},
        ParityCase{"N4_causal_zigzag_short", 4, "causal=1:T=6"},
        ParityCase{"N4_causal_zigzag_empty_shards", 4, "causal=1:T=3:pad=1"},
        ParityCase{"N2_causal_value_width_differs", 2, "causal=1:T=37:d=16:dv=24:H=4:Hkv=2"},
        ParityCase{"N2_ulysses_value_width_differs", 2, "strategy=ulysses:causal=1:T=37:d=16:dv=8:H=4:Hkv=2"},
        ParityCase{"N2_module_causal_rotary_gqa", 2, "case=module:causal=1:T=37:H=4:Hkv=2"},
        ParityCase{"N2_ulysses_causal_zigzag_gqa_padding", 2, "strategy=ulysses:causal=1:T=41:H=4:Hkv=2:pad=1"},
        ParityCase{"N2_ulysses_bfloat16", 2, "strategy=ulysses:dtype=bfloat16:causal=1:T=37"},
        ParityCase{"N4_ulysses_float64_contiguous", 4, "strategy=ulysses:dtype=float64:causal=1:layout=contiguous:T=45"},
        ParityCase{"N4_ulysses_full_scale", 4, "strategy=ulysses:causal=0:T=43:H=8:Hkv=4:scale=0.2"},
        // Dynamic NTK scales for the whole sequence (37 > 8 positions), not for each rank's shard.
        ParityCase{"N2_module_dynamic_ntk", 2, "case=module:ntk=1:causal=1:T=37:H=4:Hkv=2"},
        ParityCase{"N2_module_ulysses", 2, "case=module:strategy=ulysses:causal=1:T=37:H=4:Hkv=2"},
        ParityCase{"N4_module_float64", 4, "case=module:dtype=float64:causal=1:layout=contiguous:T=30:H=2:Hkv=1"}),
    [](const ::testing::TestParamInfo<ParityCase>& info) { return std::string(info.param.label); });

/// Every rank must end with the same clear error, quickly.
void expect_clean_error_everywhere(const std::vector<RankResult>& results, const std::string& needle) {
  for (const RankResult& r : results) {
    EXPECT_EQ(r.exit_code, kExitCleanError) << describe(results);
    EXPECT_NE(r.output.find(needle), std::string::npos) << "expected '" << needle << "' in\n" << describe(results);
  }
}

TEST(RingFailures, RankWithAShorterShardFailsOnEveryRank) {
  const auto start = std::chrono::steady_clock::now();
  const auto results = run_ranks("case=disagree:what=length", 2, {0, 1}, std::chrono::seconds(20), std::chrono::seconds(60));
  expect_clean_error_everywhere(results, "the ranks hold [12, 11] positions (23 in all), but that layout over 2 ranks gives them [11, 12]");
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(20)) << "the error should not wait for the timeout";
}

TEST(RingFailures, RankWithOtherHeadsFailsOnEveryRank) {
  const auto results = run_ranks("case=disagree:what=heads", 3, {0, 1, 2}, std::chrono::seconds(20), std::chrono::seconds(60));
  expect_clean_error_everywhere(results, "the ranks disagree on shapes");
}

TEST(RingFailures, RankWithOtherOptionsFailsOnEveryRank) {
  const auto results = run_ranks("case=disagree:what=causal", 2, {0, 1}, std::chrono::seconds(20), std::chrono::seconds(60));
  expect_clean_error_everywhere(results, "the ranks disagree on the options");
}

TEST(RingFailures, ModuleWithOtherKeyWidthsIsRefusedOnEveryRank) {
  const auto results = run_ranks("case=module_refused", 2, {0, 1}, std::chrono::seconds(20), std::chrono::seconds(60));
  expect_clean_error_everywhere(results, "context_parallel is self-attention: the module's kdim (8) and vdim (8) "
                                         "must be its embed_dim (16)");
}

TEST(RingFailures, RankWithOtherDtypeFailsOnEveryRank) {
  const auto results = run_ranks("case=disagree:what=dtype", 2, {0, 1}, std::chrono::seconds(20), std::chrono::seconds(60));
  expect_clean_error_everywhere(results, "the ranks disagree on the dtype: rank 0 has Float, rank 1 has Double");
}

TEST(RingFailures, UlyssesRanksRequiringGradForDifferentInputsFailOnEveryRank) {
  const auto results = run_ranks("case=disagree:what=ulysses_grad", 2, {0, 1}, std::chrono::seconds(20), std::chrono::seconds(60));
  expect_clean_error_everywhere(results, "the ranks disagree on which of q, k, v require grad");
}

TEST(RingFailures, RankThatNeverCallsEndsTheOthersAtTheTimeout) {
  const auto start = std::chrono::steady_clock::now();
  const auto results = run_ranks("case=idle", 2, {0, 1}, std::chrono::seconds(3), std::chrono::seconds(60));
  ASSERT_EQ(results.size(), 2u);
  EXPECT_EQ(results[0].exit_code, kExitCleanError) << describe(results);
  EXPECT_NE(results[0].output.find("the ranks could not compare their inputs"), std::string::npos) << describe(results);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(30));
}

TEST(RingFailures, UlyssesWithHeadsTheRanksDoNotDivideFailsOnEveryRank) {
  const auto results = run_ranks("case=disagree:what=ulysses_heads", 3, {0, 1, 2}, std::chrono::seconds(20), std::chrono::seconds(60));
  expect_clean_error_everywhere(results, "the 3 ranks must divide H = 2 and H_kv = 2; use the Ring strategy");
}

TEST(RingFailures, RankThatNeverStartsEndsTheOthersAfterTheTimeout) {
  const auto start = std::chrono::steady_clock::now();
  const auto results = run_ranks("case=parity", 2, {0}, std::chrono::seconds(3), std::chrono::seconds(60));
  const auto elapsed = std::chrono::steady_clock::now() - start;
  expect_clean_error_everywhere(results, "did not form within 3000 ms");
  EXPECT_LT(elapsed, std::chrono::seconds(30));
}

TEST(RingFailures, RankKilledMidRunEndsTheOthersWithAnError) {
  const auto results = run_ranks("case=killed", 2, {0, 1}, std::chrono::seconds(5), std::chrono::seconds(90));
  ASSERT_EQ(results.size(), 2u);
  EXPECT_EQ(results[1].signal, SIGKILL) << describe(results);
  EXPECT_EQ(results[0].exit_code, kExitCleanError) << describe(results);
  EXPECT_NE(results[0].output.find("attn::distributed::ring_attention: rank 0"), std::string::npos) << describe(results);
}

// The layout helpers, in one process.
TEST(SequenceLayout, ZigzagHoldsChunkRAndTwoNMinusOneMinusR) {
  const auto positions = dist::shard_positions(10, 1, 2, dist::SequenceLayout::Zigzag);
  // 4 chunks of 10: [0,2) [2,5) [5,7) [7,10); rank 1 holds chunks 1 and 2.
  EXPECT_TRUE(torch::equal(positions, torch::tensor({2, 3, 4, 5, 6}, torch::kLong)));
  EXPECT_EQ(dist::shard_lengths(10, 2, dist::SequenceLayout::Zigzag), (std::vector<int64_t>{5, 5}));
  EXPECT_EQ(dist::shard_lengths(10, 3, dist::SequenceLayout::Contiguous), (std::vector<int64_t>{3, 3, 4}));
}

TEST(SequenceLayout, ShardThenUnshardRestoresTheSequence) {
  const torch::Tensor x = torch::arange(2 * 23 * 3).view({2, 23, 3});
  for (auto layout : {dist::SequenceLayout::Contiguous, dist::SequenceLayout::Zigzag}) {
    for (int world : {1, 2, 3, 4}) {
      std::vector<torch::Tensor> shards;
      int64_t covered = 0;
      for (int r = 0; r < world; ++r) {
        shards.push_back(dist::shard_sequence(x, 1, r, world, layout));
        // The shard's rows are exactly the positions shard_positions names.
        EXPECT_TRUE(torch::equal(shards.back(), x.index_select(1, dist::shard_positions(23, r, world, layout))));
        covered += shards.back().size(1);
      }
      EXPECT_EQ(covered, 23);
      EXPECT_TRUE(torch::equal(dist::unshard_sequence(shards, 1, layout), x));
    }
  }
}

TEST(SequenceLayout, UnshardRejectsShardsOfTheWrongLength) {
  std::vector<torch::Tensor> shards{torch::zeros({4}), torch::zeros({7})};
  EXPECT_THROW(
      {
        try {
          dist::unshard_sequence(shards, 0, dist::SequenceLayout::Zigzag);
        } catch (const c10::Error& e) {
          EXPECT_NE(std::string(e.what()).find("shards[0] has 4 positions"), std::string::npos) << e.what();
          throw;
        }
      },
      c10::Error);
}

}  // namespace
}  // namespace attn::test::ring

int main(int argc, char** argv) {
  if (argc > 1 && std::string(argv[1]) == "--ring-worker") return attn::test::ring::worker_main(argc, argv);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
