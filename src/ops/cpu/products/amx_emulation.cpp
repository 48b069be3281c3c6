// AMX's tile instructions in software (products/amx_emulation.h), after the instructions' descriptions in Intel's
// Software Developer's Manual: palette 1 (eight tiles of up to 16 rows × 64 bytes), each thread's tiles its own as
// each thread's tile state is. CMake compiles this file only under ATTN_AMX_EMULATION, for AVX-512 with FMA, which
// the AMX route needs anyway.

#include "ops/cpu/products/amx_emulation.h"

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace attn::ops::cpu::amx_emulation {
namespace {

constexpr int kTiles = 8;
constexpr int kMaxRows = 16;
constexpr int kMaxRowBytes = 64;

struct TileState {
  bool configured = false;
  /// The row a restarted load or store resumes at (LDTILECFG's byte 1); 0 after each tile instruction.
  uint8_t start_row = 0;
  uint8_t rows[kTiles] = {};
  uint16_t row_bytes[kTiles] = {};
  alignas(64) uint8_t data[kTiles][kMaxRows][kMaxRowBytes] = {};
};

thread_local TileState state;

/// Where the CPU would raise #UD or #GP: the process ends, as it would there, saying why.
[[noreturn]] void fault(const char* instruction, const char* why, int tile = -1) {
  if (tile >= 0) {
    std::fprintf(stderr, "attn: emulated AMX: %s on tile %d: %s (the CPU would fault)\n", instruction, tile, why);
  } else {
    std::fprintf(stderr, "attn: emulated AMX: %s: %s (the CPU would fault)\n", instruction, why);
  }
  std::abort();
}

/// The tile, checked to be one of palette 1's and configured.
void check_tile(const char* instruction, int tile) {
  if (!state.configured) fault(instruction, "no tile configuration is loaded (LDTILECFG)");
  if (tile < 0 || tile >= kTiles) fault(instruction, "palette 1 has tiles 0 to 7", tile);
  if (state.rows[tile] == 0) fault(instruction, "the tile has no rows in the loaded configuration", tile);
}

void zero_tile(int tile) { std::memset(state.data[tile], 0, sizeof(state.data[tile])); }

/// A denormal input read as zero of its sign (DAZ).
inline float read_as_normal(float value) { return std::fabs(value) < FLT_MIN ? std::copysign(0.0f, value) : value; }

/// bfloat16 widened to float, a denormal read as zero of its sign.
inline float widened(uint16_t bits) {
  const uint32_t word = (bits & 0x7F80u) != 0 ? static_cast<uint32_t>(bits) << 16 : static_cast<uint32_t>(bits & 0x8000u) << 16;
  float value;
  std::memcpy(&value, &word, sizeof value);
  return value;
}

/// A denormal result flushed to zero of its sign (FTZ).
inline float flushed(float value) { return read_as_normal(value); }

/// The checks TILELOADD and TILESTORED add: whole dwords a row, and a restart row inside the tile.
void check_rows_move(const char* instruction, int tile) {
  check_tile(instruction, tile);
  if (state.row_bytes[tile] % 4 != 0) fault(instruction, "its bytes per row are not whole dwords", tile);
  if (state.start_row >= state.rows[tile]) fault(instruction, "the configuration's start row is past its rows", tile);
}

}  // namespace

void load_config(const void* config) {
  uint8_t bytes[64];
  std::memcpy(bytes, config, sizeof bytes);
  if (bytes[0] == 0) return release();
  if (bytes[0] != 1) fault("ldtilecfg", "only palette 1 exists");
  for (int i = 2; i < 16; ++i) {
    if (bytes[i] != 0) fault("ldtilecfg", "bytes 2-15 are reserved and must be zero");
  }
  TileState next;
  next.start_row = bytes[1];
  for (int t = 0; t < 16; ++t) {
    uint16_t row_bytes;
    std::memcpy(&row_bytes, bytes + 16 + 2 * t, sizeof row_bytes);
    const uint8_t rows = bytes[48 + t];
    if (t >= kTiles) {
      if (rows != 0 || row_bytes != 0) fault("ldtilecfg", "palette 1 configures tiles 0 to 7 only");
      continue;
    }
    if (rows > kMaxRows || row_bytes > kMaxRowBytes) fault("ldtilecfg", "more than 16 rows or 64 bytes a row");
    if ((rows == 0) != (row_bytes == 0)) fault("ldtilecfg", "a tile with rows but no bytes, or bytes but no rows");
    next.rows[t] = rows;
    next.row_bytes[t] = row_bytes;
  }
  next.configured = true;
  state = next;
}

void release() { state = TileState(); }

void load(int tile, const void* base, std::ptrdiff_t stride) {
  check_rows_move("tileloadd", tile);
  // The rows from start_row on, each its bytes and zero past them; the rows past the tile's zero. (A restarted
  // load keeps the rows before start_row that it had loaded.)
  const auto* from = static_cast<const uint8_t*>(base);
  for (int r = state.start_row; r < kMaxRows; ++r) {
    std::memset(state.data[tile][r], 0, kMaxRowBytes);
    if (r < state.rows[tile]) std::memcpy(state.data[tile][r], from + r * stride, state.row_bytes[tile]);
  }
  state.start_row = 0;
}

void store(int tile, void* base, std::ptrdiff_t stride) {
  check_rows_move("tilestored", tile);
  auto* to = static_cast<uint8_t*>(base);
  for (int r = state.start_row; r < state.rows[tile]; ++r) {
    std::memcpy(to + r * stride, state.data[tile][r], state.row_bytes[tile]);
  }
  state.start_row = 0;
}

void zero(int tile) {
  check_tile("tilezero", tile);
  zero_tile(tile);
  state.start_row = 0;
}

void dot_bf16(int dst, int a, int b) {
  const char* name = "tdpbf16ps";
  check_tile(name, dst);
  check_tile(name, a);
  check_tile(name, b);
  if (dst == a || dst == b || a == b) fault(name, "its three tiles must differ", dst);
  const int rows = state.rows[dst], pairs = state.row_bytes[a] / 4, columns = state.row_bytes[dst] / 4;
  if (state.row_bytes[dst] % 4 != 0 || state.row_bytes[a] % 4 != 0 || state.row_bytes[b] % 4 != 0) {
    fault(name, "a tile's bytes per row are not a whole number of pairs", dst);
  }
  if (state.rows[a] != rows) fault(name, "A's rows differ from the destination's", a);
  if (state.rows[b] != pairs) fault(name, "B's rows differ from A's pairs per row", b);
  if (state.row_bytes[b] != state.row_bytes[dst]) fault(name, "B's bytes per row differ from the destination's", b);
  // Intel's order: per row, the pairs' first products summed in one float lane and their second in another, each
  // from zero, fused multiply-adds with denormals read as zero and flushed; then the two lanes' sum, then that
  // added to the destination's value (rounded, denormals read as zero and flushed at each add).
  for (int m = 0; m < rows; ++m) {
    float firsts[kMaxRowBytes / 4] = {}, seconds[kMaxRowBytes / 4] = {}, sums[kMaxRowBytes / 4] = {};
    uint16_t a_row[kMaxRowBytes / 2];
    std::memcpy(sums, state.data[dst][m], 4 * columns);
    std::memcpy(a_row, state.data[a][m], sizeof a_row);
    for (int k = 0; k < pairs; ++k) {
      uint16_t b_row[kMaxRowBytes / 2];
      std::memcpy(b_row, state.data[b][k], sizeof b_row);
      const float a0 = widened(a_row[2 * k]), a1 = widened(a_row[2 * k + 1]);
      for (int n = 0; n < columns; ++n) {
        firsts[n] = flushed(std::fma(a0, widened(b_row[2 * n]), firsts[n]));
        seconds[n] = flushed(std::fma(a1, widened(b_row[2 * n + 1]), seconds[n]));
      }
    }
    for (int n = 0; n < columns; ++n) {
      sums[n] = flushed(read_as_normal(sums[n]) + flushed(firsts[n] + seconds[n]));
    }
    std::memset(state.data[dst][m], 0, kMaxRowBytes);
    std::memcpy(state.data[dst][m], sums, 4 * columns);
  }
  for (int m = rows; m < kMaxRows; ++m) std::memset(state.data[dst][m], 0, kMaxRowBytes);
  state.start_row = 0;
}

}  // namespace attn::ops::cpu::amx_emulation
