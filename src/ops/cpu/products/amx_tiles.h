#pragma once
// Matrix products of bfloat16 operands accumulated and returned in float32 on AMX's tile matrix multiply
// (tdpbf16ps: a 16 × 32 bfloat16 tile of A against a 16 × 16 tile of B in pairs, into 16 × 16 floats). The
// operands are those of the pairs micro-kernel (products/bf16_pairs.h): B's pairs layout is the layout a B tile
// reads, and a row-major A's rows are an A tile's rows, so both are read where they lie; only the edges (rows
// or pairs short of a whole tile) are copied, zero-padded. Only amx_tiles_amx.cpp is compiled with AMX enabled:
// call this only where hardware_has_amx() (isa/capability.h), which also asks Linux for the tile state.

#include "ops/cpu/products/bf16_pairs.h"

#include <cstdint>

namespace attn::ops::cpu {

/// C[m, n] = alpha · A · B + beta · C over `pairs` pairs of k, as bf16_gemm (same operands, beta 0 or 1, and
/// the same lane_max), on AMX tiles. With alpha 1 and no lane_max, whole 32 × 32 blocks of C are accumulated in
/// the tiles where C lies (loaded for beta 1), the rest through a block in L1 that the epilogue scales and adds.
/// Loads the tile configuration on entry and releases the tiles on return, so it shares a thread with any other
/// AMX user (oneDNN's kernels inside LibTorch).
void amx_gemm(int64_t m, int64_t n, int64_t pairs, float alpha, LeftOperand a, PairsOperand b, float beta, float* c,
              int64_t ldc, float* lane_max = nullptr);

}  // namespace attn::ops::cpu
