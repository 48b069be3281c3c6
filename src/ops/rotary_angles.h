#pragma once
// The one definition of rotary embeddings' angle table, shared by attn::rotary_cos_sin (the differentiable
// route) and the CPU kernel of attn::rotary_positions (the fused route), so that both round cos and sin by
// the same rule: the angle position · frequency and its product with the attention factor in float64
// (position · frequency in float32 loses about 1e-3 rad by position 32k), only the result rounded to the
// dtype. It has two forms here, one over tensors and one angle at a time, side by side; their float64 cos
// and sin (ATen's vectorised, the C library's) may differ in the last bit before the rounding.

#include <ATen/core/Tensor.h>

#include <cmath>
#include <cstdint>
#include <tuple>
#include <vector>

namespace attn::ops {

/// The tensor form: cos and sin of positions · inv_freq, times attention_factor, rounded to dtype:
/// [..., half] for positions [...] and inv_freq [half], on positions' device, differentiable in inv_freq.
std::tuple<at::Tensor, at::Tensor> rotary_angle_table(const at::Tensor& positions, const at::Tensor& inv_freq,
                                                      double attention_factor, at::ScalarType dtype);

/// The same rule for one angle.
template <typename T>
inline void rotary_angle(int64_t position, double frequency, double attention_factor, T& cos, T& sin) {
  const double angle = static_cast<double>(position) * frequency;
  cos = static_cast<T>(std::cos(angle) * attention_factor);
  sin = static_cast<T>(std::sin(angle) * attention_factor);
}

/// The table on the CPU without autograd, [rows, half] with row r for positions' element r (in memory
/// order). A decoding step's few angles are computed one at a time, without the tensor form's dozen
/// operations; from kVectorisedAngles on (a prompt's), the tensor form's vectorised cos and sin are faster.
template <typename T>
class RotaryAngleRows {
 public:
  static constexpr int64_t kVectorisedAngles = 1024;

  RotaryAngleRows(const at::Tensor& positions, const at::Tensor& inv_freq, double attention_factor) {
    const at::Tensor p = positions.to(at::kLong).contiguous();
    if (p.numel() * inv_freq.numel() >= kVectorisedAngles) {
      std::tie(cos_tensor_, sin_tensor_) = rotary_angle_table(p.reshape({-1}), inv_freq, attention_factor,
                                                              c10::CppTypeToScalarType<T>::value);
      cos_tensor_ = cos_tensor_.contiguous();
      sin_tensor_ = sin_tensor_.contiguous();
      cos_ = cos_tensor_.data_ptr<T>();
      sin_ = sin_tensor_.data_ptr<T>();
      return;
    }
    const at::Tensor f = inv_freq.to(at::kDouble).contiguous();
    const int64_t rows = p.numel(), half = f.numel();
    const int64_t* position = p.data_ptr<int64_t>();
    const double* frequency = f.data_ptr<double>();
    cos_values_.resize(static_cast<size_t>(rows * half));
    sin_values_.resize(static_cast<size_t>(rows * half));
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t i = 0; i < half; ++i) {
        rotary_angle(position[r], frequency[i], attention_factor, cos_values_[r * half + i],
                     sin_values_[r * half + i]);
      }
    }
    cos_ = cos_values_.data();
    sin_ = sin_values_.data();
  }

  const T* cos() const { return cos_; }
  const T* sin() const { return sin_; }

 private:
  std::vector<T> cos_values_, sin_values_;  // one angle at a time
  at::Tensor cos_tensor_, sin_tensor_;      // the tensor form
  const T* cos_ = nullptr;
  const T* sin_ = nullptr;
};

}  // namespace attn::ops
