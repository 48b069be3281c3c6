#include "npy_file.h"

namespace attn_apps {

std::string npy_bytes(const torch::Tensor& matrix) {
  TORCH_CHECK(matrix.dim() == 2, "npy_bytes: a 2-D matrix is expected, got ", matrix.sizes());
  const torch::Tensor data = matrix.to(torch::kCPU, torch::kFloat32).contiguous();
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (" + std::to_string(data.size(0)) + ", " +
                       std::to_string(data.size(1)) + "), }";
  // Magic (6) + version (2) + header length (2) + header + '\n' is a multiple of 64.
  const size_t unpadded = 10 + header.size() + 1;
  header.append((64 - unpadded % 64) % 64, ' ');
  header.push_back('\n');
  std::string bytes = {'\x93', 'N', 'U', 'M', 'P', 'Y', '\x01', '\x00', static_cast<char>(header.size() & 0xFF),
                       static_cast<char>(header.size() >> 8)};
  bytes += header;
  bytes.append(static_cast<const char*>(data.data_ptr()), data.numel() * sizeof(float));
  return bytes;
}

}  // namespace attn_apps
