#pragma once
// Small helpers for the front-door checks: every error names the function, the argument, what was
// expected and what was given.

#include <torch/types.h>

#include <c10/util/Exception.h>

namespace attn::detail {

inline const char* dtype_name(const torch::Tensor& t) { return c10::toString(t.scalar_type()); }

/// True when `mask` broadcasts to `target` without growing it (numpy rules, aligned on the right).
bool broadcasts_to(at::IntArrayRef mask, at::IntArrayRef target);

/// Checks a tensor argument's presence is not required here; callers check `defined()` first.
void check_floating(const char* fn, const char* arg, const torch::Tensor& t);
void check_same_device_dtype(const char* fn, const char* arg, const torch::Tensor& t, const char* ref_arg,
                             const torch::Tensor& ref);

/// A bool mask (`want_bool`) or a floating mask of `ref`'s dtype, on `ref`'s device, that broadcasts to
/// `target`; `layout` spells the expected shape for the message, e.g. "[..., Tq, Tk]".
void check_mask(const char* fn, const char* arg, const torch::Tensor& mask, bool want_bool,
                const torch::Tensor& ref, at::IntArrayRef target, const char* layout);

}  // namespace attn::detail
