#pragma once
// AMX's tile instructions in software, for test builds only (CMake's ATTN_AMX_EMULATION): the AMX route's
// packing, tile products and the kernels around them then run, under the sanitizers too, on a CPU with
// AVX512-BF16 but no AMX, so that every machine's CI checks that code rather than skipping it. It checks what the
// route computes and which memory it touches, not its speed: a tile product here costs microseconds.
//
// amx_tile_config.h includes this in an emulating build, which compiles the *_amx.cpp files without the compilers'
// AMX flags. It includes <immintrin.h> first, then turns the intrinsics the products call (_tile_loadconfig,
// _tile_release, _tile_loadd, _tile_stored, _tile_zero, _tile_dpbf16ps) into calls below; clang rejects any other
// tile intrinsic there, since the target lacks AMX. Each call checks what Intel's manual says the instruction
// checks: one the CPU would fault on (a tile not configured, shapes that do not chain, a tile used twice in one
// product, rows not whole dwords) prints why and aborts, as the fault would end the process. What it cannot
// check: the GCC intrinsics' inline assembly declares no memory it reads, so in a hardware build the compiler
// may move a store past a tile load; here each is an ordinary call, which it may not.

#include <immintrin.h>

#include <cstddef>

namespace attn::ops::cpu::amx_emulation {

/// LDTILECFG: palette 1's rows and bytes per row of tiles 0-7 from the 64-byte configuration; zeroes every tile.
void load_config(const void* config);
/// TILERELEASE: back to the initial state, no tile configured.
void release();
/// TILELOADD: the tile's rows, each its configured bytes from base + row · stride; the rest of the tile zero.
void load(int tile, const void* base, std::ptrdiff_t stride);
/// TILESTORED: the tile's configured rows and bytes to base + row · stride.
void store(int tile, void* base, std::ptrdiff_t stride);
/// TILEZERO.
void zero(int tile);
/// TDPBF16PS: dst (float) += a (bfloat16 pairs) · b (bfloat16 pairs), in the order of Intel's description: the
/// pairs' first and second products in two sums from zero, then their sum added to dst; denormal inputs read as
/// zero and denormal sums flushed to zero at each step.
void dot_bf16(int dst, int a, int b);

}  // namespace attn::ops::cpu::amx_emulation

#undef _tile_loadconfig
#undef _tile_release
#undef _tile_loadd
#undef _tile_stored
#undef _tile_zero
#undef _tile_dpbf16ps
// _tile_loadconfig and _tile_release are inline functions in GCC's and clang's headers: these macros stand in
// front of them.
#define _tile_loadconfig(config) ::attn::ops::cpu::amx_emulation::load_config(config)
#define _tile_release() ::attn::ops::cpu::amx_emulation::release()
#define _tile_loadd(tile, base, stride) ::attn::ops::cpu::amx_emulation::load((tile), (base), (stride))
#define _tile_stored(tile, base, stride) ::attn::ops::cpu::amx_emulation::store((tile), (base), (stride))
#define _tile_zero(tile) ::attn::ops::cpu::amx_emulation::zero(tile)
#define _tile_dpbf16ps(dst, a, b) ::attn::ops::cpu::amx_emulation::dot_bf16((dst), (a), (b))
