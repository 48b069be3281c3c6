#pragma once
// A restricted reader for the pickles inside torch.save files (protocol 2, as torch.save writes them).
//
// Why not torch::pickle_load / torch::jit::Unpickler: on LibTorch 1.13 they fail on an ordinary
// model.state_dict() (an OrderedDict carrying `_metadata`) and cannot read the legacy (non-zip) format at all.
// This reader builds plain values only and accepts an allow-list of globals (OrderedDict, the tensor and
// parameter rebuild functions, the storage classes): a weight file from the internet can describe data, never
// run code. Sizes are checked against the input before anything is allocated.

#include <torch/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace attn::io::detail {

struct PickleValue;
using PickleRef = std::shared_ptr<PickleValue>;

/// A tensor as the pickle describes it; its bytes come from the storage `storage_key` (resolved afterwards,
/// since the legacy format stores them after the pickle).
struct TensorSpec {
  std::string storage_key;
  at::ScalarType dtype = at::kFloat;
  int64_t storage_numel = 0;
  int64_t offset = 0;
  std::vector<int64_t> sizes, strides;
};

struct PickleValue {
  enum class Kind { None, Bool, Int, BigInt, Float, String, Bytes, Tuple, List, Dict, Global, Storage, Tensor, Mark };
  Kind kind = Kind::None;
  bool boolean = false;
  int64_t integer = 0;
  double real = 0;
  std::string text;  // String, Bytes; BigInt: its little-endian bytes; Global: "module.name"; Storage: key
  std::vector<PickleRef> items;                      // Tuple, List
  std::vector<std::pair<PickleRef, PickleRef>> dict;  // Dict, in insertion order
  TensorSpec tensor;                                 // Tensor; Storage: dtype, numel and key
  int depth = 0;                                     // nesting of containers below this value

  const char* kind_name() const;
};

/// Reads one pickle starting at data[*pos] and leaves *pos after its STOP. `what` names the file for errors.
/// Throws c10::Error (TORCH_CHECK) on anything malformed, truncated or outside the allow-list.
PickleRef read_pickle(const uint8_t* data, size_t size, size_t* pos, const std::string& what);

/// The dtype of a torch storage class ("torch.FloatStorage" -> float32), or throws.
at::ScalarType storage_dtype(const std::string& global, const std::string& what);

}  // namespace attn::io::detail
