#pragma once
// linear_rows on AMX's tiles, for bfloat16 weights and a few rows of x (a decoding step's several tokens or
// sequences): yᵀ = W · xᵀ, so that A's tiles are 16 rows of the weight read where they lie, each weight
// element loaded once, and B's is x, packed once per call as column panels (products/amx_panels.h). The
// pairs' vdpbf16ps (products/bf16_pairs.h) multiplies 32 weights by one row of x per instruction, which bounds
// it below the memory's rate from about four rows on; a tile product takes 16 rows at once. Only
// amx_linear_amx.cpp is compiled with AMX enabled: call this only where hardware_has_amx().

#include <c10/util/BFloat16.h>

#include <cstdint>

namespace attn::ops::cpu {

/// Output rows (weight rows) a call of amx_linear_rows takes at a time: two C tiles. Its products are written
/// for up to four (a group of 64), which runs only if this grows; the software tiles of a test build
/// (ATTN_AMX_EMULATION) check such a change, but not its speed.
inline constexpr int64_t kAmxLinearGroup = 32;
static_assert(kAmxLinearGroup % 16 == 0 && kAmxLinearGroup <= 64, "amx_linear_rows has four C tiles of 16 rows");

/// y[r · ldy + o] = bfloat16(bias[o] + Σ_i x[r, i] · w[o · ldw + i]) for r < rows (<= 16) and o < out: x is the
/// call's x as column panels (amx_pack_column_panels of the [rows, in] x, width in), bias may be nullptr. The
/// weight rows past `out` are not read.
void amx_linear_rows(const uint32_t* x_panel, int64_t rows, int64_t in, const c10::BFloat16* w, int64_t ldw,
                     int64_t out, const float* bias, c10::BFloat16* y, int64_t ldy);

}  // namespace attn::ops::cpu
