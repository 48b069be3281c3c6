#pragma once
// Debian 12's OpenBLAS 0.3.21 takes some newer CPUs (a KVM guest of a recent Xeon) for a "Prescott" and runs
// its generic SSE3 kernels, several times slower than its AVX2 / AVX-512 ones. OPENBLAS_CORETYPE names the
// right set, but OpenBLAS reads it when it loads, before main(). The apps that lean on BLAS (attn-generate,
// attn-embed) therefore start themselves again with it set (process_restart.h); attn-bench reports it.

#include <string>

namespace attn_apps {

/// The OpenBLAS kernel set to ask for ("SKYLAKEX", "HASWELL") when the process's OpenBLAS runs generic kernels
/// on a CPU that has AVX2; empty when it does not (or the BLAS is not OpenBLAS). `core` receives the kernel set
/// OpenBLAS chose, if it is OpenBLAS.
std::string better_openblas_coretype(std::string* core = nullptr);

}  // namespace attn_apps
