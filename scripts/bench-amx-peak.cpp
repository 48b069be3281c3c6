// How fast this CPU's AMX tiles multiply bfloat16, without attn or LibTorch: the ceiling that attn's AMX route
// (src/ops/cpu/products/amx_panels_amx.cpp) and oneDNN's GEMM are measured against in bench/RESULTS.md.
// scripts/gpu-check.sh's amx stage builds and runs it on the GPU machine's host:
//
//   g++ -O2 -std=c++17 -mamx-tile -mamx-bf16 -pthread scripts/bench-amx-peak.cpp -o amx-peak && ./amx-peak [THREADS...]
//
// Three loops of tdpbf16ps, each instruction 16 × 16 × 32 multiply-adds into four accumulator tiles:
//   registers  A and B stay in their tiles: the instruction's own rate;
//   L1 loads   A and B loaded from L1 before each four products (two A tiles, two B tiles), as attn's blocks do;
//   QK d=64    the same, and every two steps the four C tiles stored to L1 and zeroed: a Q·Kᵀ block over d = 64,
//              whose products are only two steps deep.
// Then the tile work of a fused forward pass on one 128-query by 512-key tile at d = 64, its blocks as attn's first
// AMX kernel walked them (amx_gemm, since replaced: bench/RESULTS.md, issue 32, third part), the C tiles stored
// straight to C (no epilogue):
//   QK rows    S = Q·Kᵀ, row groups outer, columns inner, Kᵀ in pairs with its rows 4 KB apart (Tk = 1024);
//   QK cols    the same with Kᵀ's rows 4 KB + 64 B apart and columns outer, so that a column block's B tiles
//              are reused from L1 by every row group;
//   PV rows    O += P·V, row groups outer, P's rows 1032 B apart, V in pairs 256 B apart.
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

enum class Loop { Registers, L1Loads, QkD64, QkRowsOuter, QkColumnsOuter, PvRowsOuter };
const char* name(Loop loop) {
  switch (loop) {
    case Loop::Registers: return "registers";
    case Loop::L1Loads: return "L1 loads";
    case Loop::QkD64: return "QK d=64";
    case Loop::QkRowsOuter: return "QK rows";
    case Loop::QkColumnsOuter: return "QK cols";
    case Loop::PvRowsOuter: return "PV rows";
  }
  return "";
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

/// GFLOP/s of one thread running `passes` passes of a 128 × 512 × 64 tile product laid out as attn's.
double run_block(Loop loop, int64_t passes) {
  TileConfig config;
  for (int t = 0; t < 8; ++t) config.bytes_per_row[t] = 64, config.rows[t] = 16;
  constexpr int64_t kRows = 128, kKeys = 512, kDim = 64;
  const bool qk = loop != Loop::PvRowsOuter;
  // Q·Kᵀ: A = Q [128, 64] (rows 128 B apart), B = Kᵀ in pairs [32 pairs, ld words], C = S [128, 512].
  // P·V: A = P [128, 516] (rows 1032 B apart), B = V in pairs [256 pairs, 64 words], C = O [128, 64].
  const int64_t a_ld = qk ? kDim : kKeys + 4;  // bfloat16 elements
  const int64_t b_ld = qk ? (loop == Loop::QkColumnsOuter ? 1024 + 16 : 1024) : kDim;  // 32-bit words
  const int64_t pairs = qk ? kDim / 2 : kKeys / 2, cols = qk ? kKeys : kDim;
  std::vector<uint16_t> a(kRows * a_ld, 0x3C00);
  std::vector<uint32_t> b(pairs * b_ld, 0x3C003C00u);
  std::vector<float> c(kRows * cols, 0.0f);
  const int64_t a_stride = a_ld * 2, b_stride = b_ld * 4, c_stride = cols * 4;
  auto block = [&](int64_t g, int64_t j) {  // row groups g, g + 1 and columns j .. j + 32
    float* c0 = c.data() + g * 16 * cols + j;
    if (qk) {
      _tile_zero(0);
      _tile_zero(1);
      _tile_zero(2);
      _tile_zero(3);
    } else {
      _tile_loadd(0, c0, c_stride);
      _tile_loadd(1, c0 + 16, c_stride);
      _tile_loadd(2, c0 + 16 * cols, c_stride);
      _tile_loadd(3, c0 + 16 * cols + 16, c_stride);
    }
    for (int64_t kb = 0; kb < pairs / 16; ++kb) {
      _tile_loadd(4, a.data() + g * 16 * a_ld + kb * 32, a_stride);
      _tile_loadd(6, b.data() + kb * 16 * b_ld + j, b_stride);
      _tile_loadd(7, b.data() + kb * 16 * b_ld + j + 16, b_stride);
      _tile_loadd(5, a.data() + (g + 1) * 16 * a_ld + kb * 32, a_stride);
      _tile_dpbf16ps(0, 4, 6);
      _tile_dpbf16ps(1, 4, 7);
      _tile_dpbf16ps(2, 5, 6);
      _tile_dpbf16ps(3, 5, 7);
    }
    _tile_stored(0, c0, c_stride);
    _tile_stored(1, c0 + 16, c_stride);
    _tile_stored(2, c0 + 16 * cols, c_stride);
    _tile_stored(3, c0 + 16 * cols + 16, c_stride);
  };
  _tile_loadconfig(&config);
  const auto start = std::chrono::steady_clock::now();
  for (int64_t pass = 0; pass < passes; ++pass) {
    if (loop == Loop::QkColumnsOuter) {
      for (int64_t j = 0; j < cols; j += 32) {
        for (int64_t g = 0; g < kRows / 16; g += 2) block(g, j);
      }
    } else {
      for (int64_t g = 0; g < kRows / 16; g += 2) {
        for (int64_t j = 0; j < cols; j += 32) block(g, j);
      }
    }
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  _tile_release();
  volatile float sink = c[0];
  (void)sink;
  return 2.0 * kRows * kKeys * kDim * static_cast<double>(passes) / seconds / 1e9;
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
  constexpr int64_t kPasses = 2000;  // 16.8 GFLOP a thread, tens of ms at the expected rates
  for (Loop loop : {Loop::Registers, Loop::L1Loads, Loop::QkD64, Loop::QkRowsOuter, Loop::QkColumnsOuter,
                    Loop::PvRowsOuter}) {
    const bool tile_of_attn = loop == Loop::QkRowsOuter || loop == Loop::QkColumnsOuter || loop == Loop::PvRowsOuter;
    for (int threads : counts) {
      std::vector<double> rounds;
      for (int round = 0; round < 5; ++round) {
        std::vector<double> rates(threads);
        std::vector<std::thread> pool;
        for (int t = 0; t < threads; ++t) {
          pool.emplace_back([&, t] { rates[t] = tile_of_attn ? run_block(loop, kPasses) : run(loop, kSteps); });
        }
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
