// The CPU kernels compiled for the default instruction set: CMake sets CPU_CAPABILITY and the compiler flags for
// this file alone (cmake/kernel_isa.cmake); the kernels' headers define DefaultVariant's members (isa/variants.h).
#define ATTN_KERNEL_NAMESPACE kernel_default
#define ATTN_KERNEL_VARIANT DefaultVariant
#include "ops/cpu/flash/flash_kernel.h"
#include "ops/cpu/decode/decode_kernel.h"
#include "ops/cpu/linear/linear_rows_kernel.h"
