#pragma once
// Which products a fused call's tiles run on, chosen once per call by the op (flash_attention_cpu.cpp) from the
// inputs' dtype, what the CPU has (isa/capability.h) and what tests or the environment force. The kernels read
// the choice from FlashProblem::route (products/flash_products.h).

#include <c10/core/ScalarType.h>

namespace attn::ops::cpu {

enum class ProductRoute {
  Blas,         ///< LibTorch's BLAS once per tile (products/blas_products.h)
  FloatTiles,   ///< attn's float register tiles on AVX-512 (products/float_tile_products.h)
  BfloatPairs,  ///< bfloat16 operands multiplied in pairs on AVX512-BF16 (products/pair_products.h)
  AmxTiles,     ///< bfloat16 operands multiplied on AMX tiles, over operands packed as whole tiles
                ///< (products/amx_products.h over products/amx_panels.h)
};
/// Whether a route multiplies the bfloat16 inputs as they are (the pairs or the tiles) rather than widened.
inline bool multiplies_bfloat16(ProductRoute route) {
  return route == ProductRoute::BfloatPairs || route == ProductRoute::AmxTiles;
}
/// Whether a call's bfloat16 inputs reach the kernels as they are: the pairs and AMX's tiles multiply them, and
/// BLAS widens each tile's operands as it reads them. Only the float tiles take them widened whole first.
inline bool reads_bfloat16(ProductRoute route) { return route != ProductRoute::FloatTiles; }
const char* product_route_name(ProductRoute route);

/// The route of a fused call on inputs of dtype `input`:
///  - bfloat16 where `pairs_fit` (the pair dimensions are even: d_k forward; d_k and d_v, with a bfloat16 dO,
///    backward) takes AMX's tiles where amx_route_chosen(), else the pairs where bf16_route_chosen();
///    otherwise it is widened to float (reads_bfloat16);
///  - float32 (and bfloat16 or float16, widened) takes the tiles on the AVX-512 variant unless float_products()
///    is Blas;
///  - float64, and the portable and AVX2 variants, take BLAS.
ProductRoute flash_product_route(at::ScalarType input, bool pairs_fit);

/// Whether linear_rows multiplies bfloat16 weights as bfloat16 pairs: wherever AVX512-BF16 is active, without
/// the fused kernels' speed measurement, because streaming the weights bounds it either way.
bool linear_rows_take_pairs(at::ScalarType weight);
/// Rows of x from which linear_rows multiplies bfloat16 weights on AMX's tiles, where amx_route_chosen(): below
/// it, the pairs stream the weights at the memory's rate; from it on, they are bound by vdpbf16ps (bench/RESULTS.md).
inline constexpr int64_t kAmxLinearMinRows = 4;
/// Whether linear_rows multiplies `rows` rows by bfloat16 weights on AMX's tiles.
bool linear_rows_take_amx(at::ScalarType weight, int64_t rows);

/// Rows of x up to which linear_rows streams its weights without the software prefetch on an AMD CPU. On an AMD
/// Zen 4, one or two rows streamed 1.0x-1.3x slower with it (the hardware prefetcher keeps up alone there, and
/// the requests only compete with the loads), three rows ran alike, four mostly faster (bench/RESULTS.md).
inline constexpr int64_t kAmdUnprefetchedRows = 2;
/// Whether linear_rows prefetches its weights' stream ahead of the reader (products/weight_prefetch.h) for `rows`
/// rows of x: everywhere but up to kAmdUnprefetchedRows rows on an AMD CPU, unless ATTN_WEIGHT_PREFETCH=on or
/// =off forces it. On two Intel Xeons it made every row count 1.1x-1.6x faster.
bool linear_rows_prefetch_weights(int64_t rows);
/// Forces the weights' prefetch on or off (tests run both); `reset_weight_prefetch()` undoes it.
void force_weight_prefetch(bool on);
void reset_weight_prefetch();

/// Query rows per K/V head of a decode step (the GQA group times the step's queries) from which a bfloat16 query
/// over a bfloat16 cache runs on AMX's tiles, where amx_route_chosen(): below it, the register tiles keep up
/// with the cache's stream; from it on, their widening FMAs bound them (bench/RESULTS.md).
inline constexpr int64_t kAmxDecodeMinRows = 16;
/// Whether a decode step of `rows` query rows per K/V head multiplies on AMX's tiles.
bool decode_takes_amx(at::ScalarType query, at::ScalarType cache, int64_t rows);

/// How much faster vdpbf16ps must measure than the float FMA (bf16_pair_speed) for bfloat16 to take the pairs
/// (bench/RESULTS.md, "Where the kernels' constants come from").
inline constexpr double kBf16RouteMargin = 1.5;
/// Whether bfloat16 takes the pairs: forced with force_capability(Avx512Bf16) or ATTN_CPU_CAPABILITY=
/// avx512_bf16; otherwise where the CPU has AVX512-BF16 and bf16_pair_speed() >= kBf16RouteMargin. The first
/// call measures (under a millisecond, on the calling thread, once per process).
bool bf16_route_chosen();
/// AVX512-BF16's pair product FLOP rate over the float FMA's (pair_product_speed), measured once; 0 where not
/// measured.
double bf16_pair_speed();

/// Whether bfloat16 takes AMX's tiles: where hardware_has_amx() (isa/capability.h) and the AVX-512 variant with
/// AVX512-BF16 is active, unless ATTN_AMX=off or forced off. Not measured first, as the pairs are: one tile
/// product is 16 · 16 · 32 multiply-adds, 32 times a vdpbf16ps's.
bool amx_route_chosen();
/// Why amx_route_chosen() is false (amx_availability()'s reason, a lower variant forced, ATTN_AMX=off or
/// forced off), or nullptr where it is true.
const char* amx_route_declined();
/// Forces the AMX route on (where the CPU can) or off (tests run both); `reset_amx_tiles()` undoes it.
void force_amx_tiles(bool on);
void reset_amx_tiles();

/// The products of an int8 cache's decode: integer dot products on AVX512-VNNI (products/int8_dot.h) or every
/// element widened to float.
enum class Int8Products { Dot, Widen };
/// Whether a decode over an int8 cache takes the dot products: where the AVX-512 variant is active and the CPU
/// has AVX512-VNNI, unless ATTN_INT8_PRODUCTS=widen or forced to Widen (the op still widens head sizes the dot
/// products do not take, int8_dot_fits).
bool int8_dot_route_chosen();
/// Forces the int8 products (tests run both); `reset_int8_products()` undoes it. Dot is taken only where the
/// CPU can.
void force_int8_products(Int8Products products);
void reset_int8_products();

/// The products of float tiles on the AVX-512 variant: attn's register tiles unless ATTN_FLOAT_PRODUCTS=blas or
/// forced (bench/RESULTS.md, "Where the kernels' constants come from").
enum class FloatProducts { Tiles, Blas };
FloatProducts float_products();
/// Forces the float products (tests run both); `reset_float_products()` undoes it.
void force_float_products(FloatProducts products);
void reset_float_products();

}  // namespace attn::ops::cpu
