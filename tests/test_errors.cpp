// Bad input gets a clear error naming the argument, what was expected and what was given: a table of
// cases over the functional API, the modules' options and inputs, the attn::flash_attention op and the
// weight-file functions. (Inputs with a defined result instead of an error: test_edge_inputs.cpp. Hostile
// weight files: test_hostile_files.cpp.)

#include "support.h"

#include "common/environment.h"

#include <attn/ops/decode_attention.h>
#include <attn/ops/flash_attention.h>
#include <attn/ops/linear_rows.h>
#include <torch/version.h>

#include <cstdlib>
#include <fstream>
#include <functional>
#include <iterator>
#include <optional>
#include <string>
#include <vector>

namespace attn::test {
namespace {

struct BadInput {
  std::string name;
  std::function<void()> call;
  std::string message;  ///< a piece of the expected error message
};

void PrintTo(const BadInput& c, std::ostream* os) { *os << c.name; }

torch::Tensor r(at::IntArrayRef shape) { return torch::randn(shape); }
torch::Tensor mask(at::IntArrayRef shape) { return torch::ones(shape, torch::kBool); }

void sdpa(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, const SdpaOptions& o = {}) {
  scaled_dot_product_attention(q, k, v, o);
}
SdpaOptions with(const AttentionMasks& m) { return SdpaOptions().masks(m); }

std::vector<BadInput> functional_cases() {
  const torch::Tensor q = r({2, 3, 4}), k = r({2, 5, 4}), v = r({2, 5, 6});
  return {
      {"query_rank_1", [=] { sdpa(r({4}), k, v); }, "query must be [..., Tq, d_k] (at least 2-D), got shape [4]"},
      {"key_rank_differs", [=] { sdpa(q, r({5, 4}), v); }, "key must have the same rank as query"},
      {"value_rank_differs", [=] { sdpa(q, k, r({5, 6})); }, "value must have the same rank as query"},
      {"d_k_mismatch", [=] { sdpa(q, r({2, 5, 3}), v); }, "key must be [..., Tk, d_k] with d_k = 4 (query's last dimension), got key [2, 5, 3]"},
      {"value_length_mismatch", [=] { sdpa(q, k, r({2, 4, 6})); }, "value must be [..., Tk, d_v] with Tk = 5"},
      {"batch_mismatch", [=] { sdpa(q, r({3, 5, 4}), r({3, 5, 6})); }, "must share their leading dimensions"},
      {"integer_inputs", [=] { sdpa(q.to(torch::kLong), k.to(torch::kLong), v.to(torch::kLong)); }, "query must be a floating-point tensor"},
      // The meta device stands in for a second device, so these run on machines without a GPU too.
      {"device_mismatch", [=] { sdpa(q, k.to(torch::kMeta), v); }, "key is on meta but query is on cpu; move them to the same device"},
      {"mask_device_mismatch", [=] { sdpa(q, k, v, with(AttentionMasks().attend_mask(mask({3, 5}).to(torch::kMeta)))); }, "attend_mask is on meta but the inputs are on cpu"},
      {"dtype_mismatch", [=] { sdpa(q, k.to(torch::kFloat64), v); }, "key is Double but query is Float; convert them to the same dtype"},
#if TORCH_VERSION_MAJOR < 2  // LibTorch 2.x multiplies float16 on the CPU (test_functional.cpp runs it there)
      {"half_on_cpu", [=] { sdpa(q.to(torch::kHalf), k.to(torch::kHalf), v.to(torch::kHalf)); }, "float16 on the CPU"},
#endif
      {"padding_mask_float", [=] { sdpa(q, k, v, with(AttentionMasks().key_padding_mask(torch::zeros({2, 5})))); }, "key_padding_mask must be a bool tensor, got Float (a float mask that is added to the scores goes in additive_mask)"},
      {"padding_mask_shape", [=] { sdpa(q, k, v, with(AttentionMasks().key_padding_mask(mask({2, 4})))); }, "key_padding_mask must broadcast to [..., Tk] = [2, 5], got shape [2, 4]"},
      {"attend_mask_float", [=] { sdpa(q, k, v, with(AttentionMasks().attend_mask(torch::ones({3, 5})))); }, "goes in additive_mask"},
      {"attend_mask_shape", [=] { sdpa(q, k, v, with(AttentionMasks().attend_mask(mask({5, 3})))); }, "attend_mask must broadcast to [..., Tq, Tk] = [2, 3, 5], got shape [5, 3]"},
      {"attend_mask_too_many_dims", [=] { sdpa(q, k, v, with(AttentionMasks().attend_mask(mask({4, 2, 3, 5})))); }, "got shape [4, 2, 3, 5]"},
      {"additive_mask_bool", [=] { sdpa(q, k, v, with(AttentionMasks().additive_mask(mask({3, 5})))); }, "additive_mask must be floating"},
      {"additive_mask_dtype", [=] { sdpa(q, k, v, with(AttentionMasks().additive_mask(torch::zeros({3, 5}, torch::kFloat64)))); }, "additive_mask must have the inputs' dtype Float, got Double"},
      {"dropout_above_one", [=] { sdpa(q, k, v, SdpaOptions().dropout(1.5)); }, "dropout must be in [0, 1], got 1.5"},
      {"scale_not_finite", [=] { sdpa(q, k, v, SdpaOptions().scale(INFINITY)); }, "scale must be finite"},
      {"undefined_input", [=] { sdpa(torch::Tensor(), k, v); }, "query, key and value must be defined"},
      {"d_k_zero", [=] { sdpa(r({2, 3, 0}), r({2, 5, 0}), v); }, "d_k (query's last dimension) must be positive, got query [2, 3, 0]"},
      {"padding_mask_0d", [=] { sdpa(q, k, v, with(AttentionMasks().key_padding_mask(torch::tensor(true)))); }, "key_padding_mask must be [Tk] or have one dimension per leading dimension of the query plus Tk (2-D"},
      // A PyTorch-style [B, Tk] padding mask against [B, H, Tq, d] would line up B with H: refused.
      {"padding_mask_skips_heads", [=] { sdpa(r({2, 2, 3, 4}), r({2, 2, 5, 4}), r({2, 2, 5, 6}), with(AttentionMasks().key_padding_mask(mask({2, 5})))); }, "e.g. [B, 1, Tk] for [B, H, Tq, d] inputs), got shape [2, 5]"},
      {"attend_mask_1d", [=] { sdpa(q, k, v, with(AttentionMasks().attend_mask(mask({5})))); }, "attend_mask must be [Tq, Tk] or have the query's rank 3"},
      {"additive_mask_skips_heads", [=] { sdpa(r({2, 2, 3, 4}), r({2, 2, 5, 4}), r({2, 2, 5, 6}), with(AttentionMasks().additive_mask(torch::zeros({2, 3, 5})))); }, "additive_mask must be [Tq, Tk] or have the query's rank 4"},
  };
}

std::vector<BadInput> option_cases() {
  return {
      {"heads_do_not_divide", [] { MultiHeadAttention(10, 3); }, "embed_dim (10) must be divisible by num_heads (3)"},
      {"zero_heads", [] { MultiHeadAttention(8, 0); }, "num_heads must be positive, got 0"},
      {"negative_embed_dim", [] { MultiHeadAttention(MultiHeadAttentionOptions(-8, 2)); }, "embed_dim must be positive, got -8"},
      {"zero_kdim", [] { MultiHeadAttention(MultiHeadAttentionOptions(8, 2).kdim(0)); }, "kdim must be positive, got 0"},
      {"width_overflows", [] { MultiHeadAttention(MultiHeadAttentionOptions(8, int64_t{1} << 31).head_dim(int64_t{1} << 40)); }, "num_heads * head_dim = 2147483648 * 1099511627776 does not fit in 64 bits"},
      {"cross_width_overflows", [] { CrossAttention(CrossAttentionOptions(8, 8, int64_t{1} << 62).num_heads(4)); }, "num_heads * d_k = 4 * 4611686018427387904 does not fit in 64 bits"},
      // Widths that fit in 64 bits but whose weights do not fit in a tensor: the module and the projection are named.
      {"mha_projection_overflows", [] { MultiHeadAttention(int64_t{1} << 40, 1); }, "attn::MultiHeadAttention: cannot create q_proj, a Linear of in_features 1099511627776 and out_features 1099511627776 (a weight of [1099511627776, 1099511627776])"},
      {"head_projection_overflows", [] { AttentionHead(int64_t{1} << 40, int64_t{1} << 30); }, "attn::AttentionHead: cannot create q_proj, a Linear of in_features 1099511627776 and out_features 1073741824"},
      {"cross_projection_overflows", [] { CrossAttention(CrossAttentionOptions(int64_t{1} << 40, 8, int64_t{1} << 30)); }, "attn::CrossAttention: cannot create q_proj, a Linear of in_features 1099511627776 and out_features 1073741824"},
      {"zero_head_dim", [] { MultiHeadAttention(MultiHeadAttentionOptions(8, 2).head_dim(0)); }, "head_dim must be positive"},
      {"mha_dropout", [] { MultiHeadAttention(MultiHeadAttentionOptions(8, 2).dropout(-0.1)); }, "dropout must be in [0, 1], got -0.1"},
      {"head_zero_d_k", [] { AttentionHead(16, 0); }, "attn::AttentionHead: d_k must be positive, got 0"},
      {"head_zero_d_v", [] { AttentionHead(AttentionHeadOptions(16, 4).d_v(0)); }, "d_v must be positive"},
      {"cross_zero_context", [] { CrossAttention(8, 0, 4); }, "attn::CrossAttention: d_context_in must be positive, got 0"},
      {"cross_zero_heads", [] { CrossAttention(CrossAttentionOptions(8, 4, 4).num_heads(0)); }, "num_heads must be positive"},
  };
}

std::vector<BadInput> module_input_cases() {
  auto mha = std::make_shared<MultiHeadAttention>(MultiHeadAttentionOptions(8, 2).kdim(6).vdim(5));
  auto head = std::make_shared<AttentionHead>(8, 4);
  auto cross = std::make_shared<CrossAttention>(8, 6, 4);
  const torch::Tensor q = r({2, 3, 8}), k = r({2, 4, 6}), v = r({2, 4, 5});
  return {
      {"mha_query_width", [=] { (*mha)->forward(r({2, 3, 7}), k, v); }, "attn::MultiHeadAttention: query must have last dimension 8, got shape [2, 3, 7]"},
      {"mha_key_width", [=] { (*mha)->forward(q, r({2, 4, 8}), v); }, "key must have last dimension 6, got shape [2, 4, 8]"},
      {"mha_rank_4", [=] { (*mha)->forward(r({1, 2, 3, 8}), k, v); }, "query must be [B, T, 8] or unbatched [T, 8], got shape [1, 2, 3, 8]"},
      {"mha_key_rank_differs", [=] { (*mha)->forward(q, r({4, 6}), v); }, "key must be [B, T, 6] like the query"},
      {"mha_batch_mismatch", [=] { (*mha)->forward(q, r({3, 4, 6}), r({3, 4, 5})); }, "must have the same batch size"},
      {"mha_key_value_length", [=] { (*mha)->forward(q, k, r({2, 5, 5})); }, "key and value must have the same length"},
      {"mha_device_vs_parameters", [=] { (*mha)->forward(q.to(torch::kMeta), k.to(torch::kMeta), v.to(torch::kMeta)); }, "query is on meta but the module's parameters are on cpu; move one with module->to(device)"},
      {"mha_dtype_vs_parameters", [=] { (*mha)->forward(q.to(torch::kFloat64), k.to(torch::kFloat64), v.to(torch::kFloat64)); }, "query is Double but the module's parameters are Float; convert one with module->to(dtype)"},
      {"mha_integer_input", [=] { (*mha)->forward(q.to(torch::kInt), k, v); }, "query must be a floating-point tensor (float32, float64, bfloat16 or float16), got Int"},
      {"mha_padding_shape", [=] { (*mha)->forward(q, k, v, AttentionMasks().key_padding_mask(mask({2, 3}))); }, "key_padding_mask must be [B, Tk] = [2, 4] (true = padding), got shape [2, 3]"},
      {"mha_padding_dtype", [=] { (*mha)->forward(q, k, v, AttentionMasks().key_padding_mask(torch::zeros({2, 4}))); }, "key_padding_mask must be a bool tensor"},
      {"mha_3d_mask_is_ambiguous", [=] { (*mha)->forward(q, k, v, AttentionMasks().attend_mask(mask({4, 3, 4}))); }, "a 3-D mask is ambiguous"},
      {"mha_mask_shape", [=] { (*mha)->forward(q, k, v, AttentionMasks().attend_mask(mask({3, 5}))); }, "attn::MultiHeadAttention: attend_mask must broadcast to [Tq, Tk] = [3, 4], got shape [3, 5]"},
      {"mha_4d_mask_shape", [=] { (*mha)->forward(q, k, v, AttentionMasks().attend_mask(mask({2, 1, 3, 5}))); }, "attend_mask must broadcast to [B|1, H|1, Tq, Tk] = [2, 2, 3, 4], got shape [2, 1, 3, 5]"},
      {"head_unbatched_mask_shape", [=] { (*head)->forward(r({3, 8}), r({4, 8}), r({4, 8}), AttentionMasks().attend_mask(mask({4, 4}))); }, "attn::AttentionHead: attend_mask must broadcast to [Tq, Tk] = [3, 4], got shape [4, 4]"},
      {"mha_4d_mask_heads", [=] { (*mha)->forward(q, k, v, AttentionMasks().additive_mask(torch::zeros({2, 3, 3, 4}))); }, "additive_mask must broadcast to [B|1, H|1, Tq, Tk] = [2, 2, 3, 4], got shape [2, 3, 3, 4]"},
      {"mha_undefined_key", [=] { (*mha)->forward(q, torch::Tensor(), v); }, "key is undefined"},
      {"head_width", [=] { (*head)->forward(r({2, 3, 5})); }, "attn::AttentionHead: x must have last dimension 8, got shape [2, 3, 5]"},
      {"head_query_width", [=] { (*head)->forward(r({2, 3, 5}), q, q); }, "attn::AttentionHead: q_in must have last dimension 8, got shape [2, 3, 5]"},
      {"cross_batch_mismatch", [=] { (*cross)->forward(q, r({3, 4, 6})); }, "attn::CrossAttention: x and context must have the same batch size, got [2, 3, 8] and [3, 4, 6]"},
      {"cross_context_width", [=] { (*cross)->forward(q, r({2, 4, 8})); }, "attn::CrossAttention: context must have last dimension 6, got shape [2, 4, 8]"},
      {"cross_padding_shape", [=] { (*cross)->forward(q, k, AttentionMasks().key_padding_mask(mask({2, 3}))); }, "key_padding_mask must be [B, Tk] = [2, 4]"},
      {"mha_mask_device", [=] { (*mha)->forward(q, k, v, AttentionMasks().attend_mask(mask({3, 4}).to(torch::kMeta))); }, "attend_mask is on meta but the inputs are on cpu"},
      {"mha_additive_dtype", [=] { (*mha)->forward(q, k, v, AttentionMasks().additive_mask(torch::zeros({3, 4}, torch::kFloat64))); }, "additive_mask must have the inputs' dtype Float, got Double"},
      {"mha_zero_width_input", [=] { (*mha)->forward(r({2, 3, 0}), k, v); }, "query must have last dimension 8, got shape [2, 3, 0]"},
      {"head_integer_input", [=] { (*head)->forward(torch::ones({2, 3, 8}, torch::kLong)); }, "must be a floating-point tensor"},
  };
}

std::vector<BadInput> op_cases() {
  const torch::Tensor q = r({1, 2, 3, 4}), k = r({1, 2, 5, 4}), v = r({1, 2, 5, 6});
  const auto op = [](const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                     c10::optional<torch::Tensor> pad = c10::nullopt, c10::optional<torch::Tensor> att = c10::nullopt,
                     c10::optional<torch::Tensor> add = c10::nullopt, c10::optional<double> scale = c10::nullopt) {
    ops::FlashArguments a;
    a.key_padding_mask = pad, a.attend_mask = att, a.additive_mask = add, a.scale = scale;
    ops::flash_attention(q, k, v, a);
  };
  return {
      {"op_query_rank_3", [=] { op(r({2, 3, 4}), k, v); }, "attn::flash_attention: query must be 4-D [B, H, Tq, d_k], got shape [2, 3, 4]"},
      {"op_key_heads", [=] { op(q, r({1, 3, 5, 4}), v); }, "key must be [B, H_kv, Tk, d_k] = [1, H_kv, Tk, 4] with H_kv dividing the query's 2 heads, to match query [1, 2, 3, 4], got key [1, 3, 5, 4]"},
      {"op_value_length", [=] { op(q, k, r({1, 2, 4, 6})); }, "value must be [B, H_kv, Tk, d_v] = [1, 2, 5, d_v] to match key"},
      {"op_integer", [=] { op(q.to(torch::kLong), k.to(torch::kLong), v.to(torch::kLong)); }, "query must be float32, float64, bfloat16 or float16, got Long"},
      {"op_dtype_mismatch", [=] { op(q, k.to(torch::kFloat64), v); }, "key is Double but query is Float"},
      // The op has CPU and Meta kernels (test_meta_kernels.cpp); other backends get the dispatcher's error.
      {"op_sparse_layout", [=] { op(q.to_sparse(), k.to_sparse(), v.to_sparse()); }, "Could not run 'attn::flash_attention' with arguments from the 'SparseCPU' backend"},
      {"op_padding_float", [=] { op(q, k, v, torch::zeros({5})); }, "key_padding_mask must be a bool tensor, got Float"},
      {"op_attend_shape", [=] { op(q, k, v, c10::nullopt, mask({3, 4})); }, "attend_mask must broadcast to [B, H, Tq, Tk] = [1, 2, 3, 5], got shape [3, 4]"},
      {"op_additive_bool", [=] { op(q, k, v, c10::nullopt, c10::nullopt, mask({3, 5})); }, "additive_mask must be floating"},
      {"op_scale_nan", [=] { op(q, k, v, c10::nullopt, c10::nullopt, c10::nullopt, NAN); }, "scale must be finite, got nan"},
      {"op_d_k_zero", [=] { op(r({1, 2, 3, 0}), r({1, 2, 5, 0}), v); }, "d_k (query's last dimension) must be positive"},
      {"op_backward_grad_shape", [=] {
         auto [out, lse] = ops::flash_attention(q, k, v);
         ops::flash_attention_backward(r({1, 2, 3, 5}), q, k, v, out, lse);
       }, "grad_output must be [B, H, Tq, d_v] = [1, 2, 3, 6], got [1, 2, 3, 5]"},
      {"op_backward_lse_shape", [=] {
         auto [out, lse] = ops::flash_attention(q, k, v);
         ops::flash_attention_backward(torch::ones_like(out), q, k, v, out, lse.to(torch::kFloat64));
       }, "logsumexp must be the forward pass's [B, H, Tq] = [1, 2, 3] Float tensor"},
      {"op_backward_grad_output_dtype", [=] {
         auto [out, lse] = ops::flash_attention(q, k, v);
         ops::flash_attention_backward(torch::ones_like(out, torch::kLong), q, k, v, out, lse);
       }, "attn::flash_attention_backward: grad_output must be a floating-point tensor"},
      {"linear_bias_dtype", [] { attn::linear(r({2, 4}), r({3, 4}), r({3}).to(torch::kFloat64)); },
       "attn::linear: bias is Double but input is Float"},
      {"paged_cache_size_overflows", [] { PagedKVCache(PagedKVCacheOptions(1, 1 << 20, 1 << 20, 1 << 20, 1 << 20)); },
       "attn::PagedKVCache: cannot allocate the block pools of 1 layer(s) of [num_blocks, H_kv, block_size, head_dim]"},
      {"token_tree_chain_too_long", [] { TokenTree::chain(int64_t{1} << 62); },
       "attn::TokenTree::chain: cannot hold 4611686018427387904 candidates"},
      {"op_double_backward", [=] {
         const torch::Tensor qq = q.clone().requires_grad_();
         auto [out, lse] = ops::flash_attention(qq, k, v);
         torch::autograd::grad({out.sum()}, {qq}, {}, /*retain_graph=*/true, /*create_graph=*/true);
       }, "double backward (create_graph=True) is not supported"},
  };
}

std::vector<BadInput> weight_file_cases() {
  auto mha = std::make_shared<MultiHeadAttention>(8, 2);
  return {
      {"load_missing_file", [=] { io::load_state_dict(**mha, "/nonexistent/attn/weights.pt"); }, "attn::io: cannot open '/nonexistent/attn/weights.pt' for reading"},
      {"load_a_directory", [=] { io::load_state_dict(**mha, "/tmp"); }, "attn::io: '/tmp' is not a regular file"},
      {"save_legacy_format", [=] { io::save_state_dict(**mha, "/tmp/attn_never_written.pt", io::SaveOptions().format(io::WeightFormat::TorchLegacy)); }, "cannot write the torch legacy format; use WeightFormat::TorchZip or WeightFormat::Safetensors"},
      {"save_into_missing_directory", [=] { io::save_state_dict(**mha, "/nonexistent/attn/out.pt"); }, "attn::io: cannot write '/nonexistent/attn/out.pt': opening its temporary file '/nonexistent/attn/out.pt.tmp."},
      {"write_undefined_tensor", [] { io::write_tensors("/tmp/attn_never_written.pt", {{"x", torch::Tensor()}}); }, "tensor 'x' is undefined"},
      {"save_head_under_torch_names", [] { io::save_state_dict(*AttentionHead(4, 4), "/tmp/attn_never_written.pt", io::SaveOptions().names(io::WeightNames::TorchMultiheadAttention)); }, "saves under attn's names only"},
      {"save_concat_heads_under_torch_names", [] { io::save_state_dict(*MultiHeadAttention(MultiHeadAttentionOptions(4, 2).output_projection(false)), "/tmp/attn_never_written.pt", io::SaveOptions().names(io::WeightNames::TorchMultiheadAttention)); }, "torch.nn.MultiheadAttention needs an output projection"},
  };
}

class BadInputs : public ::testing::TestWithParam<BadInput> {};

TEST_P(BadInputs, ClearError) { EXPECT_ERROR_CONTAINS(GetParam().call(), GetParam().message); }

const auto case_name = [](const ::testing::TestParamInfo<BadInput>& info) { return info.param.name; };
INSTANTIATE_TEST_SUITE_P(Functional, BadInputs, ::testing::ValuesIn(functional_cases()), case_name);
INSTANTIATE_TEST_SUITE_P(Options, BadInputs, ::testing::ValuesIn(option_cases()), case_name);
INSTANTIATE_TEST_SUITE_P(ModuleInputs, BadInputs, ::testing::ValuesIn(module_input_cases()), case_name);
INSTANTIATE_TEST_SUITE_P(Op, BadInputs, ::testing::ValuesIn(op_cases()), case_name);
INSTANTIATE_TEST_SUITE_P(WeightFiles, BadInputs, ::testing::ValuesIn(weight_file_cases()), case_name);

TEST(BadInputs, FailedCallLeavesTheCallersTensorsUntouched) {
  const torch::Tensor q = torch::randn({2, 3, 8}), before = q.clone();
  MultiHeadAttention mha(8, 2);
  EXPECT_ERROR_CONTAINS(mha->forward(q, q, q, AttentionMasks().attend_mask(torch::ones({3, 3}))), "must be a bool tensor");
  EXPECT_TRUE(torch::equal(q, before));
}

TEST(BadInputs, InferenceOpsRefuseAnInputThatNeedsAGradient) {
  // Their results would be detached silently: a training loop would learn nothing through them.
  const torch::Tensor q = torch::randn({1, 2, 1, 4}).requires_grad_(), kc = torch::randn({1, 2, 3, 4});
  const torch::Tensor positions = torch::tensor({2}, torch::kLong), lengths = torch::tensor({3}, torch::kLong);
  EXPECT_ERROR_CONTAINS(ops::decode_attention(q, kc, kc, positions, lengths),
                        "attn::decode_attention is an inference kernel and computes no gradient, but an input requires "
                        "one: call it under torch.no_grad()");
  const torch::Tensor w = torch::randn({3, 4}).requires_grad_();
  EXPECT_ERROR_CONTAINS(ops::linear_rows(torch::randn({2, 4}), w),
                        "attn::linear_rows is an inference kernel and computes no gradient");
  // Under no_grad the same calls run, and give what a float64 softmax and product give.
  torch::NoGradGuard no_grad;
  const torch::Tensor out = ops::decode_attention(q, kc, kc, positions, lengths);
  const torch::Tensor weights = torch::softmax(torch::matmul(q.to(torch::kDouble), kc.to(torch::kDouble).transpose(-1, -2)) / 2.0, -1);
  EXPECT_LT((out.to(torch::kDouble) - torch::matmul(weights, kc.to(torch::kDouble))).abs().max().item<double>(), 1e-5);
  const torch::Tensor x = torch::randn({2, 4});
  EXPECT_LT((ops::linear_rows(x, w).to(torch::kDouble) - torch::matmul(x.to(torch::kDouble), w.to(torch::kDouble).t()))
                .abs().max().item<double>(), 1e-5);
}

/// Collects TORCH_WARN's messages while it lives, in place of the handler that prints them.
class CollectedWarnings : public c10::WarningHandler {
 public:
  CollectedWarnings() : guard_(this) {}
#if TORCH_VERSION_MAJOR >= 2
  void process(const c10::Warning& warning) override { messages.push_back(warning.msg()); }
#else
  void process(const c10::SourceLocation&, const std::string& msg, const bool) override { messages.push_back(msg); }
#endif
  std::vector<std::string> messages;

 private:
#if TORCH_VERSION_MAJOR >= 2
  c10::WarningUtils::WarningHandlerGuard guard_;
#else
  c10::Warning::WarningHandlerGuard guard_;
#endif
};

// An ATTN_* setting outside its choices (a typo, "OFF" for "off") is ignored with a warning that names the
// setting, the value and the choices, rather than silently leaving the route as it was; every setting of the
// table is checked, including one whose route this machine never decides (ATTN_AMX without AMX).
TEST(BadInputs, AnEnvironmentSettingOutsideItsChoicesWarnsAndIsIgnored) {
  struct Saved {
    std::string name;
    std::optional<std::string> value;
  };
  std::vector<Saved> saved;
  for (const EnvironmentSetting& s : environment_settings()) {
    const char* v = std::getenv(s.name.c_str());
    saved.push_back({s.name, v ? std::optional<std::string>(v) : std::nullopt});
    unsetenv(s.name.c_str());
  }
  setenv("ATTN_AMX", "OFF", 1);
  setenv("ATTN_FLOAT_PRODUCTS", "blas", 1);
  setenv("ATTN_WEIGHT_PREFETCH", "", 1);
  const std::vector<std::string> sentences = common::settings_outside_their_choices();
  std::vector<std::string> warned;
  {
    CollectedWarnings warnings;
    common::warn_of_settings_outside_their_choices();
    warned = warnings.messages;
  }
  const char* amx = common::environment_choice("ATTN_AMX");
  const char* products = common::environment_choice("ATTN_FLOAT_PRODUCTS");
  const char* prefetch = common::environment_choice("ATTN_WEIGHT_PREFETCH");
  setenv("ATTN_AMX", "off", 1);
  const char* amx_off = common::environment_choice("ATTN_AMX");
  for (const Saved& s : saved) {
    if (s.value) setenv(s.name.c_str(), s.value->c_str(), 1); else unsetenv(s.name.c_str());
  }
  ASSERT_EQ(sentences, std::vector<std::string>{"attn: ATTN_AMX=OFF is not one of on, off; it is ignored"});
  ASSERT_EQ(warned.size(), 1u);
  EXPECT_NE(warned[0].find(sentences[0]), std::string::npos) << warned[0];
  EXPECT_EQ(amx, nullptr);
  EXPECT_STREQ(products, "blas");
  EXPECT_EQ(prefetch, nullptr);  // empty counts as unset
  EXPECT_STREQ(amx_off, "off");
  // A name outside the table is the library's own mistake.
  EXPECT_THROW(common::environment_choice("ATTN_NOT_A_SETTING"), c10::Error);
}

// The settings' one table (common/environment.cpp) is what the library reads and attn-bench --help prints;
// docs/backends.md lists them by hand, so each must be there as NAME=choice|choice.
TEST(BadInputs, TheBackendsDocListsEveryEnvironmentSettingWithItsChoices) {
  std::ifstream file(std::string(ATTN_DOCS_DIR) + "/backends.md");
  ASSERT_TRUE(file) << ATTN_DOCS_DIR << "/backends.md";
  const std::string doc((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  ASSERT_FALSE(environment_settings().empty());
  for (const EnvironmentSetting& s : environment_settings()) {
    std::string listed = s.name + "=";
    for (size_t i = 0; i < s.choices.size(); ++i) listed += (i ? "|" : "") + s.choices[i];
    EXPECT_NE(doc.find("`" + listed + "`"), std::string::npos) << "docs/backends.md lacks `" << listed << "`";
    EXPECT_FALSE(s.meaning.empty()) << s.name;
  }
}

TEST(BadInputs, MixedCpuAndCudaDevices) {
  if (!cuda_available()) GTEST_SKIP() << "CUDA is not available: skipping the cross-device checks";
  const torch::Tensor q = torch::randn({2, 3, 4});
  EXPECT_ERROR_CONTAINS(sdpa(q, q.cuda(), q), "key is on cuda:0 but query is on cpu");
  MultiHeadAttention mha(4, 2);
  EXPECT_ERROR_CONTAINS(mha->forward(q.cuda(), q.cuda(), q.cuda()), "but the module's parameters are on cpu");
  EXPECT_ERROR_CONTAINS(sdpa(q, q, q, with(AttentionMasks().attend_mask(torch::ones({3, 3}, torch::kBool).cuda()))),
                        "attend_mask is on cuda:0 but the inputs are on cpu");
}

}  // namespace
}  // namespace attn::test
