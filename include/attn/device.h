#pragma once
// Device selection from a user-facing string, for apps and config files.

#include <attn/cpu_kernel_info.h>  // cpu_kernel_info() was declared here before it had a header of its own

#include <torch/types.h>

#include <string>

namespace attn {

/// Parses "auto" | "cpu" | "cuda" | "cuda:N".
///  - "auto" gives cuda:0 when a CUDA device is usable, else cpu.
///  - "cuda" / "cuda:N" throw a c10::Error that says why when CUDA is absent or N is out of range.
/// Anything else throws, listing the accepted forms.
torch::Device resolve_device(const std::string& spec);

/// True when this LibTorch was built with CUDA and at least one device is visible.
bool cuda_available();

/// Throws a c10::Error naming `fn`, the device and this LibTorch (its version, and whether it was built with
/// CUDA) when tensors cannot be made on `device`: a CUDA device on a CPU-only LibTorch, with no GPU visible, or
/// past the last one.
void check_device_usable(const char* fn, const torch::Device& device);

}  // namespace attn
