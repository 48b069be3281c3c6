// The fused attention kernels for the avx512 instruction set (CMake sets CPU_CAPABILITY and the compiler
// flags for this file alone; see CMakeLists.txt).
#define ATTN_KERNEL_NAMESPACE kernel_avx512
#include "ops/cpu/flash_attention_kernel_impl.h"
#include "ops/cpu/decode_attention_kernel_impl.h"
#include "ops/cpu/linear_rows_kernel_impl.h"
