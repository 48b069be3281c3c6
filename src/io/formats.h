#pragma once
// The weight-file formats, each as bytes <-> named CPU tensors. Nothing here knows about modules or names.

#include <attn/io/state_dict.h>

#include <torch/types.h>

#include <cstdint>
#include <fstream>
#include <map>
#include <string>
#include <vector>

namespace attn::io::detail {

using TensorMap = std::map<std::string, at::Tensor>;

/// The file opened for binary reading, positioned at its end (tellg() is its size). Throws naming the file and
/// the system error, or saying it is not a regular file.
std::ifstream open_regular_file(const std::string& path);

/// The whole file. Throws as open_regular_file does.
std::vector<uint8_t> read_file(const std::string& path);

/// The first min(n, size) bytes of the file (enough for detect_format with n = 9).
std::vector<uint8_t> read_file_start(const std::string& path, size_t n);

/// The format, from the first bytes; throws if it is none of them.
WeightFormat detect_format(const std::vector<uint8_t>& bytes, const std::string& path);

/// The torch.save formats may hold entries that are not tensors (a checkpoint's step, config, optimizer
/// lists): they are skipped, and listed in `skipped` as "name (kind)" when it is given.
TensorMap read_torch_zip(const std::vector<uint8_t>& bytes, const std::string& path, std::vector<std::string>* skipped);
TensorMap read_torch_legacy(const std::vector<uint8_t>& bytes, const std::string& path,
                            std::vector<std::string>* skipped);
/// The same, for callers that do not need the list (the fuzz targets).
TensorMap read_torch_zip(const std::vector<uint8_t>& bytes, const std::string& path);
TensorMap read_torch_legacy(const std::vector<uint8_t>& bytes, const std::string& path);
TensorMap read_safetensors(const std::vector<uint8_t>& bytes, const std::string& path);
/// The same read from the file: the header first, then each tensor's bytes straight into its storage, without a
/// copy of the whole file (the same checks, by the same parser).
TensorMap read_safetensors_file(const std::string& path);

/// torch.save-compatible zip bytes (Python's torch.load reads them as a dict of tensors).
std::string torch_zip_bytes(const TensorMap& tensors);
std::string safetensors_bytes(const TensorMap& tensors);

}  // namespace attn::io::detail
