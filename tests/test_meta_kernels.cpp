// The Meta kernels of attn::flash_attention (what torch.compile and torch.export trace with) promise the
// results the CPU kernels produce: same shapes, dtypes and strides, and the same argument errors.

#include "support.h"

#include <attn/ops/flash_attention.h>

namespace attn::test {
namespace {

void expect_same_layout(const torch::Tensor& meta, const torch::Tensor& cpu, const std::string& what) {
  SCOPED_TRACE(what);
  EXPECT_TRUE(meta.is_meta());
  EXPECT_EQ(meta.sizes(), cpu.sizes());
  EXPECT_EQ(meta.strides(), cpu.strides());
  EXPECT_EQ(meta.scalar_type(), cpu.scalar_type());
}

TEST(MetaKernels, ForwardAndBackwardMatchTheCpuKernelsLayout) {
  for (auto dtype : {torch::kFloat32, torch::kFloat64, torch::kBFloat16}) {
    for (bool causal : {false, true}) {
      const auto opts = torch::TensorOptions().dtype(dtype);
      torch::manual_seed(3);
      const torch::Tensor q = torch::randn({2, 3, 5, 8}, opts), k = torch::randn({2, 3, 7, 8}, opts),
                          v = torch::randn({2, 3, 7, 4}, opts);
      const torch::Tensor pad = torch::rand({2, 1, 7}) < 0.2;
      const auto meta = [](const torch::Tensor& t) { return t.to(torch::kMeta); };
      const std::string name = std::string(c10::toString(dtype)) + (causal ? " causal" : "");

      ops::FlashArguments a;
      a.key_padding_mask = pad, a.is_causal = causal, a.causal_offset = 2, a.scale = 0.3;
      ops::FlashArguments meta_a = a;
      meta_a.key_padding_mask = meta(pad);
      auto [out, lse] = ops::flash_attention(q, k, v, a);
      auto [meta_out, meta_lse] = ops::flash_attention(meta(q), meta(k), meta(v), meta_a);
      expect_same_layout(meta_out, out, name + " output");
      expect_same_layout(meta_lse, lse, name + " logsumexp");

      const torch::Tensor grad = torch::randn_like(out);
      auto [dq, dk, dv, dsinks] = ops::flash_attention_backward(grad, q, k, v, out, lse, a);
      auto [meta_dq, meta_dk, meta_dv, meta_dsinks] =
          ops::flash_attention_backward(meta(grad), meta(q), meta(k), meta(v), meta(out), meta(lse), meta_a);
      expect_same_layout(meta_dq, dq, name + " grad query");
      expect_same_layout(meta_dk, dk, name + " grad key");
      expect_same_layout(meta_dv, dv, name + " grad value");
    }
  }
}

TEST(MetaKernels, RefuseWhatTheCpuKernelsRefuse) {
  const torch::Tensor q = torch::randn({1, 2, 3, 4}, torch::kMeta), k = torch::randn({1, 2, 5, 4}, torch::kMeta);
  EXPECT_ERROR_CONTAINS(ops::flash_attention(q, k, torch::randn({1, 2, 6, 4}, torch::kMeta)),
                        "attn::flash_attention: value must be [B, H_kv, Tk, d_v] = [1, 2, 5, d_v] to match key");
  ops::FlashArguments padded;
  padded.key_padding_mask = torch::zeros({1, 2, 4}, torch::dtype(torch::kBool).device(torch::kMeta));
  EXPECT_ERROR_CONTAINS(ops::flash_attention(q, k, k, padded),
                        "attn::flash_attention: key_padding_mask must broadcast to [B, H, Tk] = [1, 2, 5]");
  EXPECT_ERROR_CONTAINS(ops::flash_attention(q.to(torch::kHalf), k.to(torch::kHalf), k.to(torch::kHalf)),
                        "attn::flash_attention: query must be float32, float64 or bfloat16, got Half");
  ops::FlashArguments infinite;
  infinite.scale = INFINITY;
  EXPECT_ERROR_CONTAINS(ops::flash_attention(q, k, k, infinite),
                        "attn::flash_attention: scale must be finite, got inf");
}

}  // namespace
}  // namespace attn::test
