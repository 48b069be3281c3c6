#include <attn/hadamard_rows.h>

#include "common/checks.h"
#include "common/dtypes.h"
#include "common/walsh_hadamard.h"

#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>

#include <string>
#include <type_traits>

namespace attn {

torch::Tensor hadamard_rows(const torch::Tensor& x) {
  TORCH_CHECK(x.defined() && x.dim() >= 1 && common::is_attention_dtype(x.scalar_type()) && x.device().is_cpu(),
              "attn::hadamard_rows: x must be a float32, float64, bfloat16 or float16 CPU tensor [..., d], got ",
              x.defined() ? std::string(common::dtype_name(x)) + " " + c10::str(x.sizes()) + " on " +
                                c10::str(x.device())
                          : std::string("an undefined tensor"));
  TORCH_CHECK(!(x.requires_grad() && at::GradMode::is_enabled()),
              "attn::hadamard_rows computes no gradient, but x requires one: call it under torch::NoGradGuard");
  // One pass per row (widen into the output, then the butterflies): a decoding step rotates a few rows, where a
  // chain of tensor operations would cost more than the transform.
  const torch::Tensor src = x.contiguous();
  const at::ScalarType out_type = x.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  torch::Tensor out = at::empty(src.sizes(), src.options().dtype(out_type));
  const int64_t d = x.size(-1), count = d > 0 ? out.numel() / d : 0;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, src.scalar_type(), "attn::hadamard_rows", [&] {
    using out_t = std::conditional_t<std::is_same_v<scalar_t, double>, double, float>;
    const scalar_t* in = src.data_ptr<scalar_t>();
    out_t* rows = out.data_ptr<out_t>();
    at::parallel_for(0, count, 256, [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        out_t* row = rows + r * d;
        for (int64_t i = 0; i < d; ++i) row[i] = static_cast<out_t>(in[r * d + i]);
        common::hadamard_in_place(row, d);
      }
    });
  });
  return out;
}

}  // namespace attn
