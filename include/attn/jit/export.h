#pragma once
// TorchScript export: an attn module as a self-contained torch::jit::Module that any PyTorch or LibTorch
// loads with torch.jit.load / torch::jit::load, without attn.
//
//   attn::MultiHeadAttention mha(attn::MultiHeadAttentionOptions(64, 4).causal(true));
//   torch::jit::Module m = attn::jit::to_torchscript(*mha);
//   m.save("mha.pt");                  // Python: m = torch.jit.load("mha.pt"); y = m(q, k, v)
//
// What is exported:
//   * the parameters, copied (a snapshot; later changes to the C++ module do not reach the export), under the
//     same names as the module's own: q_proj.weight, q_proj.bias, k_proj.*, v_proj.*, out_proj.*, so
//     named_parameters() of the two are equal. A projection without bias has a `bias` attribute that is None;
//   * the options, as attributes (embed_dim, num_heads, head_dim, kdim, vdim, d_in, d_k, d_v, ..., bias,
//     causal, bottom_right, dropout, output_projection), and the training flag of the module;
//   * `forward`, written in TorchScript with stock ATen ops only. It computes what the module's Math backend
//     computes, masks and edge cases included: batched [B, T, E] and unbatched [T, E] inputs, key_padding_mask
//     (true = padding), attend_mask (true = may attend), additive_mask (-inf blocks), causal with its
//     alignment, zeros for a query that may attend to nothing, no NaN/Inf leaking from a blocked key.
//     The shared attention core is one method, `_attention`, on each exported module.
//       MultiHeadAttention: forward(query, key, value, key_padding_mask=None, attend_mask=None, additive_mask=None)
//       AttentionHead:      forward(query_input, key_input=None, value_input=None, <masks>); key_input defaults
//                           to query_input and value_input to key_input
//       CrossAttention:     forward(x, context, <masks>)
//
// Limits: an inference export. forward returns the output only, never the attention weights; dropout applies
// when the exported module is in training mode (as in C++), but the export always runs the Math path (the
// Fused and Torch backends' speed and memory profile are not exported; results agree within rounding).
// Input checks are lighter than the C++ modules'. The export lives on the module's device and dtype.

#include <attn/modules/attention_head.h>
#include <attn/modules/cross_attention.h>
#include <attn/modules/multi_head_attention.h>

#include <torch/csrc/jit/api/module.h>

namespace attn::jit {

/// Class __torch__.attn.MultiHeadAttention (submodules of class __torch__.attn.Linear).
torch::jit::Module to_torchscript(const MultiHeadAttentionImpl& module);
/// Class __torch__.attn.AttentionHead.
torch::jit::Module to_torchscript(const AttentionHeadImpl& module);
/// Class __torch__.attn.CrossAttention.
torch::jit::Module to_torchscript(const CrossAttentionImpl& module);

}  // namespace attn::jit
