#pragma once
// A float32 matrix as NumPy's .npy (format 1.0: magic, a Python-dict header padded to 64 bytes, then the data
// in C order), readable by numpy.load. The format is a page long, so it is written here rather than pulled in as
// a dependency.

#include <torch/torch.h>

#include <string>

namespace attn_apps {

/// The .npy bytes of `matrix` (2-D, converted to contiguous little-endian float32).
std::string npy_bytes(const torch::Tensor& matrix);

}  // namespace attn_apps
