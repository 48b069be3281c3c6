#pragma once
// Parameter names: other conventions onto attn's (q_proj.weight, ..., out_proj.bias) and back.

#include "io/formats.h"

#include <map>
#include <string>
#include <vector>

namespace attn::io::detail {

/// attn's parameter names and shapes for one module, in its registration order.
using ShapeMap = std::map<std::string, std::vector<int64_t>>;

/// The naming convention of a file's tensors (WeightNames::Auto resolved by looking at the names).
WeightNames detect_names(const TensorMap& tensors);

/// The file's tensors renamed (and, for packed in_proj or per-head tensors, split or joined) into attn's
/// names. Tensors that no rule covers keep their names, so that the caller reports them as unexpected.
/// `expected` gives the widths needed to split torch.nn.MultiheadAttention's packed in_proj tensors.
TensorMap to_attn_names(const TensorMap& tensors, WeightNames names, const ShapeMap& expected);

/// What torch.nn.MultiheadAttention's packed tensor `name` (in_proj_weight, in_proj_bias) stands for in the
/// module: its q, k and v names, their rows (where to_attn_names splits it), and the shape they make packed
/// ([q + k + v rows, ...]). No parts where `name` is not such a name or the module lacks one of the three.
struct PackedProjection {
  std::vector<std::string> parts;
  std::vector<int64_t> rows;
  std::vector<int64_t> shape;
};
PackedProjection packed_projection(const std::string& name, const ShapeMap& expected);

/// attn's tensors under torch.nn.MultiheadAttention's names (packed in_proj when `packed`, i.e. when
/// kdim == vdim == embed_dim).
TensorMap to_torch_multihead_names(const TensorMap& tensors, bool packed);

}  // namespace attn::io::detail
