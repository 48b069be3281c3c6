// How fast this machine streams memory read in chunks that do not follow each other: the question a paged KV
// cache asks (docs/decoding.md, "Paged blocks"). Reads TOTAL MiB as chunks of CHUNK bytes, every thread a
// share of them in order, and prints the median of 9 passes in GB/s for three placements of the chunks:
//   adjacent   chunk i at i (a plain streaming read),
//   strided    chunk i at 16 i in a pool twice the size (a sequence's blocks among 15 others' in turn),
//   shuffled   chunk i at a random even slot of that pool;
// each without and with software prefetches 4 KiB ahead in the order of reading (as the decode kernel
// prefetches 16 rows ahead).
//
//   g++ -O3 -march=native -fopenmp scripts/chunked-read.cpp -o /tmp/chunked-read
//   /tmp/chunked-read 1024 4096 32768 131072      # TOTAL MiB, then chunk sizes in bytes
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace {

/// How far ahead the prefetches reach: 16 rows of 128 bfloat16 elements, as the decode kernel's (kPrefetchKeys).
constexpr size_t kAhead = 4096;

double median_gbps(const char* pool, const std::vector<size_t>& slots, size_t chunk, bool prefetch) {
  const size_t n = slots.size(), floats = chunk / sizeof(float);
  std::vector<double> seconds;
  volatile float sink = 0;
  for (int pass = 0; pass < 9; ++pass) {
    const auto start = std::chrono::steady_clock::now();
    float total = 0;
#pragma omp parallel for schedule(static) reduction(+ : total)
    for (size_t i = 0; i < n; ++i) {
      const float* c = reinterpret_cast<const float*>(pool + slots[i] * chunk);
      float sums[64] = {};  // four cache lines' worth of independent sums, so the adds keep up with memory
      size_t e = 0;
      for (; e + 64 <= floats; e += 64) {
        if (prefetch) {  // the lines kAhead bytes further on in this thread's order of reading
          const size_t ahead = e * sizeof(float) + kAhead, j = std::min(i + ahead / chunk, n - 1);
          const char* line = pool + slots[j] * chunk + ahead % chunk;
          for (size_t l = 0; l < 4; ++l) __builtin_prefetch(line + 64 * l);
        }
        for (size_t k = 0; k < 64; ++k) sums[k] += c[e + k];
      }
      for (; e < floats; ++e) sums[0] += c[e];
      for (float s : sums) total += s;
    }
    seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    sink = sink + total;
  }
  std::sort(seconds.begin(), seconds.end());
  return static_cast<double>(n * chunk) / seconds[4] / 1e9;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3 || std::string(argv[1]) == "--help") {
    std::printf("usage: %s TOTAL_MiB CHUNK_BYTES... (chunk sizes multiples of 64, TOTAL a multiple of 8 chunks)\n",
                argv[0]);
    return argc < 3 ? 2 : 0;
  }
  const size_t total = std::strtoull(argv[1], nullptr, 10) << 20;
  std::printf("%d threads, %zu MiB read per pass; GB/s, median of 9 passes\n", omp_get_max_threads(), total >> 20);
  std::printf("%10s %20s %20s %20s\n", "chunk", "adjacent (+prefetch)", "strided (+prefetch)", "shuffled (+prefetch)");
  for (int a = 2; a < argc; ++a) {
    const size_t chunk = std::strtoull(argv[a], nullptr, 10);
    if (chunk < 64 || chunk % 64 != 0 || (total / chunk) % 8 != 0) {  // 16 apart fills a pool of 2n slots when 8 | n
      std::fprintf(stderr, "chunk %s: must be a multiple of 64 bytes that leaves TOTAL a multiple of 8 chunks\n",
                   argv[a]);
      return 2;
    }
    const size_t n = total / chunk, pool_chunks = 2 * n;
    char* pool = static_cast<char*>(std::aligned_alloc(4096, pool_chunks * chunk));
    if (pool == nullptr) {
      std::fprintf(stderr, "cannot allocate %zu bytes\n", pool_chunks * chunk);
      return 1;
    }
    std::memset(pool, 1, pool_chunks * chunk);
    std::vector<size_t> adjacent(n), strided(n), shuffled(n);
    for (size_t i = 0; i < n; ++i) {
      adjacent[i] = i;
      strided[i] = (16 * i) % pool_chunks + 16 * i / pool_chunks;  // wraps onto the next free slot
      shuffled[i] = 2 * i;
    }
    std::shuffle(shuffled.begin(), shuffled.end(), std::mt19937_64(7));
    std::printf("%10zu", chunk);
    for (const auto* slots : {&adjacent, &strided, &shuffled}) {
      const double plain = median_gbps(pool, *slots, chunk, false), prefetched = median_gbps(pool, *slots, chunk, true);
      std::printf("   %7.1f (%7.1f)   ", plain, prefetched);
    }
    std::printf("\n");
    std::free(pool);
  }
  return 0;
}
