#pragma once
// A float32 matrix written as NumPy's .npy (format 1.0: magic, a Python-dict header padded to 64 bytes, then the
// data in C order), readable by numpy.load. The format is a page long, so it is written here rather than
// pulled in as a dependency.

#include <torch/torch.h>

#include <string>

namespace attn_apps {

/// Writes `matrix` (2-D, converted to contiguous float32) to `path` through a temporary file renamed into place,
/// so that a failure leaves no partial file. Throws std::runtime_error naming the path.
void write_npy(const std::string& path, const torch::Tensor& matrix);

}  // namespace attn_apps
