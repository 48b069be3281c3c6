// How fast this CPU's AMX tiles multiply bfloat16, without attn or LibTorch: the ceiling that attn's AMX route
// (src/ops/cpu/products/amx_tiles_amx.cpp) and oneDNN's GEMM are measured against in bench/RESULTS.md.
// scripts/gpu-check.sh's amx stage builds and runs it on the GPU machine's host:
//
//   g++ -O2 -std=c++17 -mamx-tile -mamx-bf16 -pthread scripts/bench-amx-peak.cpp -o amx-peak && ./amx-peak [THREADS...]
//
// Three loops of tdpbf16ps, each instruction 16 × 16 × 32 multiply-adds into four accumulator tiles:
//   registers  A and B stay in their tiles: the instruction's own rate;
//   L1 loads   A and B loaded from L1 before each four products (two A tiles, two B tiles), as attn's blocks do;
//   QK d=64    the same, and every two steps the four C tiles stored to L1 and zeroed: a Q·Kᵀ block over d = 64,
//              whose products are only two steps deep.
// Each loop runs on 1, 2 and every thread (or the counts given), one thread per core as the OS places them, and
// reports GFLOP/s summed over the threads (the median of 5 rounds).

#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

namespace {

constexpr int kArchReqXcompPerm = 0x1023;  // arch_prctl: ask for a dynamically enabled state component
constexpr int kXfeatureXtiledata = 18;     // AMX's tile data

struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t bytes_per_row[16] = {};
  uint8_t rows[16] = {};
};

enum class Loop { Registers, L1Loads, QkD64 };
const char* name(Loop loop) {
  return loop == Loop::Registers ? "registers" : loop == Loop::L1Loads ? "L1 loads" : "QK d=64";
}

constexpr double kFlopsPerProduct = 16.0 * 16.0 * 32.0 * 2.0;

/// GFLOP/s of one thread running `steps` steps of four tile products.
double run(Loop loop, int64_t steps) {
  TileConfig config;
  for (int t = 0; t < 8; ++t) config.bytes_per_row[t] = 64, config.rows[t] = 16;
  alignas(64) uint16_t a[2][16 * 32], b[2][16 * 32];
  alignas(64) float c[4][16 * 16];
  std::fill(&a[0][0], &a[0][0] + 2 * 16 * 32, uint16_t{0x3C00});  // bfloat16 2^-7: sums stay finite
  std::fill(&b[0][0], &b[0][0] + 2 * 16 * 32, uint16_t{0x3C00});
  _tile_loadconfig(&config);
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  _tile_loadd(4, a[0], 64);
  _tile_loadd(5, a[1], 64);
  _tile_loadd(6, b[0], 64);
  _tile_loadd(7, b[1], 64);
  const auto start = std::chrono::steady_clock::now();
  for (int64_t s = 0; s < steps; ++s) {
    if (loop != Loop::Registers) {
      _tile_loadd(4, a[0], 64);
      _tile_loadd(6, b[0], 64);
      _tile_loadd(7, b[1], 64);
      _tile_loadd(5, a[1], 64);
    }
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
    if (loop == Loop::QkD64 && (s & 1)) {
      _tile_stored(0, c[0], 64);
      _tile_stored(1, c[1], 64);
      _tile_stored(2, c[2], 64);
      _tile_stored(3, c[3], 64);
      _tile_zero(0);
      _tile_zero(1);
      _tile_zero(2);
      _tile_zero(3);
    }
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  _tile_stored(0, c[0], 64);
  _tile_release();
  volatile float sink = c[0][0];
  (void)sink;
  return 4.0 * kFlopsPerProduct * static_cast<double>(steps) / seconds / 1e9;
}

}  // namespace

int main(int argc, char** argv) {
  if (syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) != 0) {
    std::perror("amx-peak: Linux refused the AMX tile state (arch_prctl)");
    return 1;
  }
  std::vector<int> counts;
  for (int i = 1; i < argc; ++i) counts.push_back(std::atoi(argv[i]));
  if (counts.empty()) counts = {1, 2, static_cast<int>(std::thread::hardware_concurrency())};
  constexpr int64_t kSteps = 2'000'000;  // 8M products, a few ms per thread at the expected rates
  std::printf("%-10s %8s %14s %18s\n", "loop", "threads", "GFLOP/s", "GFLOP/s per thread");
  for (Loop loop : {Loop::Registers, Loop::L1Loads, Loop::QkD64}) {
    for (int threads : counts) {
      std::vector<double> rounds;
      for (int round = 0; round < 5; ++round) {
        std::vector<double> rates(threads);
        std::vector<std::thread> pool;
        for (int t = 0; t < threads; ++t) pool.emplace_back([&, t] { rates[t] = run(loop, kSteps); });
        for (std::thread& t : pool) t.join();
        double total = 0;
        for (double r : rates) total += r;
        rounds.push_back(total);
      }
      std::sort(rounds.begin(), rounds.end());
      std::printf("%-10s %8d %14.1f %18.1f\n", name(loop), threads, rounds[2], rounds[2] / threads);
    }
  }
  return 0;
}
