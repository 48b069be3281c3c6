#pragma once
// AMX's tile configuration as attn's products use it: palette 1, eight tiles of 16 rows × 64 bytes. Include only
// in files compiled with AMX enabled (products/*_amx.cpp). Internal linkage, one copy per including file. In a
// test build under ATTN_AMX_EMULATION, the tile intrinsics run in software (products/amx_emulation.h).

#include <cstdint>

#ifdef ATTN_AMX_EMULATION
#include "ops/cpu/products/amx_emulation.h"
#endif

namespace attn::ops::cpu {
namespace {

struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t bytes_per_row[16] = {};
  uint8_t rows[16] = {};
};
static_assert(sizeof(TileConfig) == 64, "ldtilecfg reads 64 bytes");

/// Rows of every tile, and pairs (or floats) per row.
constexpr int64_t kTileRows = 16;
constexpr int64_t kTileWordsPerRow = 16;

const TileConfig& eight_full_tiles() {
  static const TileConfig config = [] {
    TileConfig c;
    for (int t = 0; t < 8; ++t) c.bytes_per_row[t] = 64, c.rows[t] = kTileRows;
    return c;
  }();
  return config;
}

}  // namespace
}  // namespace attn::ops::cpu
