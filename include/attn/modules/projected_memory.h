#pragma once
// An encoder memory projected once by a cross-attention module, so a decoder's every step reuses it instead
// of projecting the same encoder output again.

#include <torch/types.h>

namespace attn {

/// Keys [B, H_kv, Tk, d_k] and values [B, H_kv, Tk, d_v] from a module's project_memory(); pass them to the
/// same module's forward(query, memory). Plain tensors: share them across steps and threads, move them with
/// .to(), or drop them when the sequence ends.
struct ProjectedMemory {
  torch::Tensor key;
  torch::Tensor value;
};

}  // namespace attn
