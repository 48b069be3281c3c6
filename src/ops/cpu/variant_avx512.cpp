// The CPU kernels compiled for the avx512 instruction set: CMake sets CPU_CAPABILITY and the compiler flags for
// this file alone (cmake/kernel_isa.cmake); the kernels' headers define Avx512Variant's members (isa/variants.h).
#define ATTN_KERNEL_NAMESPACE kernel_avx512
#define ATTN_KERNEL_VARIANT Avx512Variant
#include "ops/cpu/flash/flash_kernel.h"
#include "ops/cpu/decode/decode_kernel.h"
#include "ops/cpu/linear/linear_rows_kernel.h"
