#pragma once
// Which of attn's CPU kernels run on this machine: the instruction-set variant, the product routes of the fused
// kernels, and whether their loops run threaded. For logs and benchmarks (attn-bench prints it).

#include <string>
#include <vector>

namespace attn {

/// Which fused CPU kernel runs here, for logs and benchmarks.
struct CpuKernelInfo {
  /// The instruction-set variant: "default", "avx2", "avx512" or "avx512_bf16".
  std::string variant;
  /// Whether a bfloat16 forward pass multiplies bfloat16 rather than widening its inputs to float: on AMX tiles
  /// (amx_tiles), or in pairs on AVX512-BF16 where the CPU has the instructions and they measured faster, at
  /// first use.
  bool bfloat16_route = false;
  /// Whether those bfloat16 products, forward and backward, run on AMX's tiles: where the CPU has AMX-BF16 and
  /// AVX512-BF16, the OS has enabled the tile state, Linux grants it to this process, attn was built with AMX
  /// kernels and ATTN_CPU_CAPABILITY leaves the avx512_bf16 variant, unless ATTN_AMX=off.
  bool amx_tiles = false;
  /// Why amx_tiles is false (empty where it is true), the first of those that fails, e.g. "this CPU lists no
  /// AMX-BF16 and AMX-TILE in CPUID", "ATTN_AMX=off", or "the CPU has AMX, but Linux refused this process the
  /// tile state (arch_prctl ARCH_REQ_XCOMP_PERM: ...)". On a CPU that lists AMX, the summary says it too.
  std::string amx_unused_reason;
  /// That measurement: the FLOP rate of AVX512-BF16's pair product (vdpbf16ps) over the float FMA's, in
  /// register-only loops; the route is taken at 1.5 or more (0 where not measured).
  double bfloat16_pair_speed = 0.0;
  /// The fused kernel's float tile products, forward and backward: "tiles" (attn's own register tiles, the
  /// AVX-512 variant's default) or "blas" (LibTorch's BLAS once per tile: the other variants, or
  /// ATTN_FLOAT_PRODUCTS=blas).
  std::string float_products;
  /// The decode kernel's products over an int8 KV cache: "dot" (integer dot products on AVX512-VNNI, the query
  /// and the weights rounded to int16; the AVX-512 variant's default where the CPU has them) or "widen" (every
  /// element widened to float: CPUs without AVX512-VNNI, the other variants, or ATTN_INT8_PRODUCTS=widen).
  std::string int8_products;
  /// attn::linear's and the modules' projections' bfloat16 products beyond the few rows that attn's own kernel
  /// takes: "libtorch" (at::linear, on oneDNN's bfloat16 kernels: CPUs with AVX-512), "widened" (widened to
  /// float for the float GEMM: x86 CPUs without AVX-512, where LibTorch's bfloat16 GEMM runs reference loops) or
  /// "widened_many" (LibTorch's below 128 rows, widened from 128 rows on, without a recorded gradient: CPUs whose
  /// AVX512-BF16 measures slower than the float FMA and that have no AMX, where oneDNN's bfloat16 kernels trail
  /// the float GEMM; on CPUs with AVX-512, ATTN_BF16_GEMM=native or =widen forces the choice).
  std::string bfloat16_linear;
  /// attn's own kernel for those few rows (attn::ops::linear_rows) with bfloat16 weights: "amx" (AMX's tiles
  /// from a few rows on, each 16 weight rows against every row at once; pairs for fewer rows), "pairs"
  /// (AVX512-BF16's pair products) or "widened" (the weights widened to float as they stream in).
  std::string bfloat16_linear_rows;
  /// The decode kernel's products for a bfloat16 query over a bfloat16 cache: "amx" (AMX's tiles where a step
  /// has 16 or more query rows per K/V head, a GQA group times its tokens; the cache's elements widened to float
  /// for fewer) or "widened" (always widened to float).
  std::string bfloat16_decode;
  /// Whether the kernels spread their tiles over LibTorch's intra-op threads. True when attn was built with
  /// OpenMP (GCC); a build without it (clang) runs the tile loops on the calling thread, and only the tile
  /// GEMMs run threaded, inside the BLAS, whose rounding may then depend on the thread count.
  bool parallel_loops = true;
  /// One line that says the above, e.g. "avx512 (bfloat16 widened to float: AVX512-BF16 measured 0.52x),
  /// float products on attn's tiles, int8 cache on AVX512-VNNI dot products", or "avx512_bf16 (bfloat16
  /// multiplied on AMX tiles), ...".
  std::string summary;
};
CpuKernelInfo cpu_kernel_info();

/// One of the ATTN_* environment settings that force a CPU kernel route, for a comparison or to pin results
/// across machines (docs/backends.md). Each is read once per process, where its route is decided; the first
/// time any is read, every one set outside its choices is ignored with a warning that names them.
struct EnvironmentSetting {
  std::string name;                  ///< e.g. "ATTN_AMX"
  std::vector<std::string> choices;  ///< e.g. {"on", "off"}
  std::string meaning;               ///< one line
};
/// Every such setting, from the table the library reads them by.
std::vector<EnvironmentSetting> environment_settings();

}  // namespace attn
