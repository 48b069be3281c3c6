#pragma once
// Checks that every layer uses at its front door: each error names the function, the argument, what was
// expected and what was given.

#include "common/dtypes.h"

#include <ATen/core/Tensor.h>
#include <c10/core/SymIntArrayRef.h>
#include <c10/util/Exception.h>

#include <string>
#include <vector>

namespace attn::common {

inline const char* dtype_name(const at::Tensor& t) { return dtype_name(t.scalar_type()); }

/// A size or count option that must be positive, e.g. a module's num_heads or a cache's capacity.
void check_positive(const char* fn, const char* option, int64_t value);

/// A KV cache's layer index: in [0, num_layers), or an error naming `caller` (the call the user made).
void check_layer_index(const char* caller, int64_t layer, int64_t num_layers);
/// The same for a method of a cache class, named "cls::method" in the message (built only for one).
void check_layer_index(const char* cls, const char* method, int64_t layer, int64_t num_layers);

/// How many of T new positions each batch row takes (a right-padded ragged batch): one count per row, each in
/// [0, T]; the message names `fn` and `arg`, the caller's own names for them.
void check_row_counts(const char* fn, const char* arg, const std::vector<int64_t>& counts, int64_t batch, int64_t T);

/// True when `mask` broadcasts to `target` without growing it (numpy rules, aligned on the right). Sizes may be
/// symbolic (torch.compile's and torch.export's traces): each comparison then guards, none specialises a size.
bool broadcasts_to(c10::SymIntArrayRef mask, c10::SymIntArrayRef target);
bool broadcasts_to(at::IntArrayRef mask, at::IntArrayRef target);

/// `t` has one of the attention dtypes (is_attention_dtype), and is not float16 on the CPU of LibTorch 1.x.
/// Callers check `defined()` first.
void check_floating(const char* fn, const char* arg, const at::Tensor& t);
/// `t` is on `ref`'s device: "ARG is on X but REF_ARG is on Y; move them to the same device".
void check_same_device(const char* fn, const char* arg, const at::Tensor& t, const char* ref_arg,
                       const at::Tensor& ref);
void check_same_device_dtype(const char* fn, const char* arg, const at::Tensor& t, const char* ref_arg,
                             const at::Tensor& ref);

/// An index tensor the kernels read on the host (cu_seqlens, block_table, tree_mask): on the CPU, or on meta beside
/// a meta `ref`. A meta one beside real inputs would send the call to the Meta kernel, which returns an empty
/// (uninitialised) result instead of an error.
void check_host_index_device(const char* fn, const char* arg, const at::Tensor& t, const char* ref_arg,
                             const at::Tensor& ref);
/// `t` is on meta only if `ref` is (positions and other index tensors that may sit on the inputs' device).
void check_not_meta_beside_real(const char* fn, const char* arg, const at::Tensor& t, const char* ref_arg,
                                const at::Tensor& ref);

/// `t` is a defined integer tensor (not bool), e.g. positions.
void check_integer(const char* fn, const char* arg, const at::Tensor& t);

/// Rotary embeddings' x and positions, whichever function rotates: x [B, H, T, head_dim] or unbatched
/// [H, T, head_dim]; positions on x's device, integers, [T] or (with a 4-D x) [B, T]. Sizes may be symbolic.
void check_rotary_positions(const char* fn, const at::Tensor& x, const at::Tensor& positions);

/// What a mask holds.
enum class MaskKind {
  Bool,                  ///< true/false per pair or key
  AdditiveOfInputDtype,  ///< floating, the dtype of `ref` (the functional core and the modules)
  AdditiveAnyFloat,      ///< any attention dtype (the op converts it to its compute type)
};

/// A mask of `kind` on `ref`'s device that broadcasts to `target`; `layout` spells the expected shape for
/// the message, e.g. "[..., Tq, Tk]". The symbolic form takes sizes that may be symbolic (the Meta kernels').
void check_mask_symbolic(const char* fn, const char* arg, const at::Tensor& mask, MaskKind kind,
                         const at::Tensor& ref, c10::SymIntArrayRef target, const char* layout);
void check_mask(const char* fn, const char* arg, const at::Tensor& mask, MaskKind kind, const at::Tensor& ref,
                at::IntArrayRef target, const char* layout);

}  // namespace attn::common
