// Every operator schema of the `attn` namespace, in one place. The kernels register themselves per dispatch
// key next to their code (ops/cpu/, ops/autograd/).

#include <torch/library.h>

TORCH_LIBRARY(attn, m) {
  m.def(
      "flash_attention(Tensor query, Tensor key, Tensor value, Tensor? key_padding_mask=None, "
      "Tensor? attend_mask=None, Tensor? additive_mask=None, bool is_causal=False, SymInt causal_offset=0, "
      "float? scale=None, int window_left=-1, int window_right=-1, float softcap=0.0, Tensor? alibi_slopes=None, "
      "Tensor? sinks=None, Tensor? cu_seqlens_q=None, Tensor? cu_seqlens_k=None) -> (Tensor output, Tensor logsumexp)");
  m.def(
      "flash_attention_backward(Tensor grad_output, Tensor query, Tensor key, Tensor value, Tensor output, "
      "Tensor logsumexp, Tensor? key_padding_mask, Tensor? attend_mask, Tensor? additive_mask, bool is_causal, "
      "SymInt causal_offset, float? scale, int window_left=-1, int window_right=-1, float softcap=0.0, "
      "Tensor? alibi_slopes=None, Tensor? sinks=None, Tensor? cu_seqlens_q=None, Tensor? cu_seqlens_k=None) "
      "-> (Tensor grad_query, Tensor grad_key, Tensor grad_value, Tensor grad_sinks)");
  m.def(
      "decode_attention(Tensor query, Tensor key_cache, Tensor value_cache, Tensor query_starts, "
      "Tensor key_lengths, bool is_causal=True, float? scale=None, int window_left=-1, int window_right=-1, "
      "float softcap=0.0, Tensor? alibi_slopes=None, Tensor? sinks=None, Tensor? key_scales=None, "
      "Tensor? value_scales=None, Tensor? block_table=None, Tensor? tree_mask=None) -> Tensor");
  m.def("linear_rows(Tensor input, Tensor weight, Tensor? bias=None) -> Tensor");
  m.def("linear_rows_many(Tensor input, Tensor[] weights, Tensor?[] biases) -> Tensor[]");
  m.def("rotary_positions(Tensor x, Tensor positions, Tensor inv_freq, float attention_factor=1.0, "
        "bool interleaved=False) -> Tensor");
}
