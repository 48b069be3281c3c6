// The CPU kernels compiled for the avx2 instruction set: CMake sets CPU_CAPABILITY and the compiler flags for
// this file alone (cmake/kernel_isa.cmake); the kernels' headers define Avx2Variant's members (isa/variants.h).
#define ATTN_KERNEL_NAMESPACE kernel_avx2
#define ATTN_KERNEL_VARIANT Avx2Variant
#include "ops/cpu/flash/flash_kernel.h"
#include "ops/cpu/decode/decode_kernel.h"
#include "ops/cpu/linear/linear_rows_kernel.h"
