#include "npy_file.h"

#include <cstdio>
#include <fstream>
#include <stdexcept>

namespace attn_apps {

void write_npy(const std::string& path, const torch::Tensor& matrix) {
  TORCH_CHECK(matrix.dim() == 2, "write_npy: a 2-D matrix is expected, got ", matrix.sizes());
  const torch::Tensor data = matrix.to(torch::kCPU, torch::kFloat32).contiguous();
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (" + std::to_string(data.size(0)) + ", " +
                       std::to_string(data.size(1)) + "), }";
  // Magic (6) + version (2) + header length (2) + header + '\n' is a multiple of 64.
  const size_t unpadded = 10 + header.size() + 1;
  header.append((64 - unpadded % 64) % 64, ' ');
  header.push_back('\n');
  const std::string temporary = path + ".partial";
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    if (!out) throw std::runtime_error("cannot write '" + temporary + "'");
    const unsigned char preamble[] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0,
                                      static_cast<unsigned char>(header.size() & 0xFF),
                                      static_cast<unsigned char>(header.size() >> 8)};
    out.write(reinterpret_cast<const char*>(preamble), sizeof preamble);
    out << header;
    out.write(static_cast<const char*>(data.data_ptr()), static_cast<std::streamsize>(data.numel() * sizeof(float)));
    if (!out.flush()) {
      std::remove(temporary.c_str());
      throw std::runtime_error("writing '" + temporary + "' failed");
    }
  }
  if (std::rename(temporary.c_str(), path.c_str()) != 0) {
    std::remove(temporary.c_str());
    throw std::runtime_error("cannot rename '" + temporary + "' to '" + path + "'");
  }
}

}  // namespace attn_apps
