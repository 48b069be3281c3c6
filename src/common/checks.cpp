#include "common/checks.h"

#include <torch/version.h>

namespace attn::common {

void check_layer_index(const char* caller, int64_t layer, int64_t num_layers) {
  check_layer_index(caller, nullptr, layer, num_layers);
}

void check_layer_index(const char* cls, const char* method, int64_t layer, int64_t num_layers) {
  TORCH_CHECK(layer >= 0 && layer < num_layers, cls, method ? "::" : "", method ? method : "",
              ": layer must be in [0, ", num_layers, ") (the cache's layers), got ", layer);
}

void check_row_counts(const char* fn, const char* arg, const std::vector<int64_t>& counts, int64_t batch, int64_t T) {
  TORCH_CHECK(static_cast<int64_t>(counts.size()) == batch, fn, ": ", arg, " must have one entry per batch row (",
              batch, "), got ", counts.size());
  for (size_t b = 0; b < counts.size(); ++b) {
    TORCH_CHECK(counts[b] >= 0 && counts[b] <= T, fn, ": ", arg, "[", b, "] must be in [0, T = ", T, "], got ",
                counts[b]);
  }
}

void check_integer(const char* fn, const char* arg, const at::Tensor& t) {
  TORCH_CHECK(t.defined() && at::isIntegralType(t.scalar_type(), /*includeBool=*/false), fn, ": ", arg,
              " must be an integer tensor, got ", t.defined() ? dtype_name(t) : "an undefined tensor");
}

void check_not_meta_beside_real(const char* fn, const char* arg, const at::Tensor& t, const char* ref_arg,
                                const at::Tensor& ref) {
  if (t.device().is_meta()) check_same_device(fn, arg, t, ref_arg, ref);
}

void check_host_index_device(const char* fn, const char* arg, const at::Tensor& t, const char* ref_arg,
                             const at::Tensor& ref) {
  TORCH_CHECK(t.device().is_cpu() || t.device().is_meta(), fn, ": ", arg, " must be on the CPU, got ", t.device());
  check_not_meta_beside_real(fn, arg, t, ref_arg, ref);
}

void check_rotary_positions(const char* fn, const at::Tensor& x, const at::Tensor& positions) {
  TORCH_CHECK(x.defined() && (x.dim() == 3 || x.dim() == 4), fn,
              ": x must be [B, H, T, head_dim] or unbatched [H, T, head_dim], got ",
              x.defined() ? x.sym_sizes() : c10::SymIntArrayRef{});
  TORCH_CHECK(positions.defined(), fn, ": positions is undefined");
  TORCH_CHECK(positions.device() == x.device(), fn, ": positions is on ", positions.device(), " but x is on ",
              x.device());
  check_integer(fn, "positions", positions);
  const c10::SymInt T = x.sym_size(-2);
  TORCH_CHECK(positions.dim() == 1 || (positions.dim() == 2 && x.dim() == 4), fn, ": positions must be [T]",
              x.dim() == 4 ? " or [B, T]" : "", " for x ", x.sym_sizes(), ", got ", positions.sym_sizes());
  if (positions.dim() == 1) {
    TORCH_CHECK(positions.sym_size(0) == T, fn, ": positions must be [T] = [", T, "] for x ", x.sym_sizes(),
                " (heads first: T is x's dimension -2), got ", positions.sym_sizes());
  } else {
    TORCH_CHECK(positions.sym_size(0) == x.sym_size(0) && positions.sym_size(1) == T, fn,
                ": positions must be [B, T] = [", x.sym_size(0), ", ", T, "] for x ", x.sym_sizes(), ", got ",
                positions.sym_sizes());
  }
}

void check_positive(const char* fn, const char* option, int64_t value) {
  TORCH_CHECK(value > 0, fn, ": ", option, " must be positive, got ", value);
}

bool broadcasts_to(c10::SymIntArrayRef mask, c10::SymIntArrayRef target) {
  if (mask.size() > target.size()) return false;
  const size_t offset = target.size() - mask.size();
  for (size_t i = 0; i < mask.size(); ++i) {
    if (mask[i] != 1 && mask[i] != target[offset + i]) return false;
  }
  return true;
}

bool broadcasts_to(at::IntArrayRef mask, at::IntArrayRef target) {
  return broadcasts_to(c10::fromIntArrayRefKnownNonNegative(mask), c10::fromIntArrayRefKnownNonNegative(target));
}

void check_floating(const char* fn, const char* arg, const at::Tensor& t) {
  const auto s = t.scalar_type();
  TORCH_CHECK(is_attention_dtype(s), fn, ": ", arg,
              " must be a floating-point tensor (float32, float64, bfloat16 or float16), got ", dtype_name(t));
#if TORCH_VERSION_MAJOR < 2
  TORCH_CHECK(!(t.is_cpu() && s == at::kHalf), fn, ": ", arg,
              " is float16 on the CPU, which LibTorch 1.x's CPU matrix products do not support; use float32, "
              "float64 or bfloat16 there (float16 works on CUDA)");
#endif
}

void check_same_device(const char* fn, const char* arg, const at::Tensor& t, const char* ref_arg,
                       const at::Tensor& ref) {
  TORCH_CHECK(t.device() == ref.device(), fn, ": ", arg, " is on ", t.device(), " but ", ref_arg, " is on ",
              ref.device(), "; move them to the same device");
}

void check_same_device_dtype(const char* fn, const char* arg, const at::Tensor& t, const char* ref_arg,
                             const at::Tensor& ref) {
  check_same_device(fn, arg, t, ref_arg, ref);
  TORCH_CHECK(t.scalar_type() == ref.scalar_type(), fn, ": ", arg, " is ", dtype_name(t), " but ", ref_arg,
              " is ", dtype_name(ref), "; convert them to the same dtype");
}

void check_mask(const char* fn, const char* arg, const at::Tensor& mask, MaskKind kind, const at::Tensor& ref,
                at::IntArrayRef target, const char* layout) {
  check_mask_symbolic(fn, arg, mask, kind, ref, c10::fromIntArrayRefKnownNonNegative(target), layout);
}

void check_mask_symbolic(const char* fn, const char* arg, const at::Tensor& mask, MaskKind kind,
                         const at::Tensor& ref, c10::SymIntArrayRef target, const char* layout) {
  switch (kind) {
    case MaskKind::Bool:
      TORCH_CHECK(mask.scalar_type() == at::kBool, fn, ": ", arg, " must be a bool tensor, got ", dtype_name(mask),
                  at::isFloatingType(mask.scalar_type()) ? " (a float mask that is added to the scores goes in "
                                                           "additive_mask)"
                                                         : "");
      break;
    case MaskKind::AdditiveOfInputDtype:
      TORCH_CHECK(mask.scalar_type() != at::kBool, fn, ": ", arg,
                  " must be floating (it is added to the scores); a bool mask goes in attend_mask "
                  "(true = may attend) or key_padding_mask (true = padding)");
      TORCH_CHECK(mask.scalar_type() == ref.scalar_type(), fn, ": ", arg, " must have the inputs' dtype ",
                  dtype_name(ref), ", got ", dtype_name(mask));
      break;
    case MaskKind::AdditiveAnyFloat:
      TORCH_CHECK(is_attention_dtype(mask.scalar_type()), fn, ": ", arg,
                  " must be floating (it is added to the scores), got ", dtype_name(mask));
      break;
  }
  TORCH_CHECK(mask.device() == ref.device(), fn, ": ", arg, " is on ", mask.device(), " but the inputs are on ",
              ref.device());
  TORCH_CHECK(broadcasts_to(mask.sym_sizes(), target), fn, ": ", arg, " must broadcast to ", layout, " = ", target,
              ", got shape ", mask.sym_sizes());
}

}  // namespace attn::common
