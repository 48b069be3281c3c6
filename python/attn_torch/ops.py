"""Python functions over attn's dispatcher operators (torch.ops.attn.*), with keyword arguments.

Each function calls its operator once and adds nothing else but a TypeError, naming the argument, for a
required tensor that is not one (the dispatcher's own message names neither): the operators check their
arguments themselves and raise errors that name the argument and its shape. The same operators are what attn's
C++ API calls (include/attn/ops/*.h in attn's repository states each rule these docstrings summarise).
"""
from typing import Optional, Tuple, Union

import torch
from torch import Tensor

__all__ = ["flash_attention", "decode_attention", "linear_rows"]


def _require_tensors(function: str, **arguments) -> None:
    for name, value in arguments.items():
        if not isinstance(value, Tensor):
            raise TypeError(f"attn_torch.{function}: {name} must be a Tensor, got {type(value).__name__}")


def flash_attention(query: Tensor, key: Tensor, value: Tensor, *,
                    key_padding_mask: Optional[Tensor] = None,
                    attend_mask: Optional[Tensor] = None,
                    additive_mask: Optional[Tensor] = None,
                    is_causal: bool = False,
                    causal_offset: Union[int, torch.SymInt] = 0,
                    scale: Optional[float] = None,
                    window_left: int = -1,
                    window_right: int = -1,
                    softcap: float = 0.0,
                    alibi_slopes: Optional[Tensor] = None,
                    sinks: Optional[Tensor] = None,
                    cu_seqlens_q: Optional[Tensor] = None,
                    cu_seqlens_k: Optional[Tensor] = None) -> Tuple[Tensor, Tensor]:
    """Fused attention, softmax(scale · q·kᵀ + bias and masks) · v, differentiable: torch.ops.attn.flash_attention.

    The scores are computed tile by tile with an online softmax; no [Tq, Tk] tensor is made, forward or backward.

    Args:
        query: [B, H, Tq, d_k]. key: [B, H_kv, Tk, d_k]. value: [B, H_kv, Tk, d_v]. H_kv must divide H (grouped-
            query attention: query head h reads key/value head h // (H // H_kv); no repeat is made).
            float32, float64, bfloat16 or float16 on the CPU (bfloat16 and float16 are computed in float32, the
            output rounded back);
            on CUDA float16 or bfloat16 without masks, for the calls attn's CUDA routes take.
        key_padding_mask: bool, broadcastable to [B, H, Tk]; True = this key is padding (no query attends to
            it), as torch.nn.MultiheadAttention's key_padding_mask. For [B, H, Tq, d] inputs give [B, 1, Tk].
        attend_mask: bool, broadcastable to [B, H, Tq, Tk]; True = this query may attend to this key, as the
            bool attn_mask of torch.nn.functional.scaled_dot_product_attention.
        additive_mask: floating, broadcastable to [B, H, Tq, Tk]; added to the scaled scores. -inf blocks a
            pair; a finite value (e.g. -1e9) only lowers its weight, so NaN there still reaches the output.
        is_causal: key j is allowed for query i only if j <= i + causal_offset.
        causal_offset: Tk - Tq aligns the causal diagonal bottom-right (queries are the last Tq positions, as
            with a KV cache, and as FlashAttention does); 0 aligns it top-left (j <= i, as
            scaled_dot_product_attention(is_causal=True)). They agree when Tq == Tk. Within -2^60 .. 2^60.
        scale: multiplies q·k; None is 1 / sqrt(d_k).
        window_left, window_right: key j is allowed for query i only if
            i + o - window_left <= j <= i + o + window_right, o = causal_offset; -1 leaves a side unbounded
            (as does any window of 2^61 or more, which reaches every key).
            transformers' sliding_window=W (causal) is is_causal=True, window_left=W - 1, window_right=0.
        softcap: > 0 replaces each scaled score s by softcap · tanh(s / softcap), before the bias and masks
            (Gemma 2's attn_logit_softcapping); 0 is off. The kernel's tanh is a rational approximation
            within 4e-7 relative error, in float64 too.
        alibi_slopes: [H] or [B, H], floating (any float dtype, taken in the computation's): adds -slope_h ·
            |i + o - j| to the scores; no gradient.
        sinks: [H], floating (any float dtype, as alibi_slopes): one extra logit per head in every row's softmax
            denominator, attending to nothing (GPT-OSS's sinks); differentiable.
        cu_seqlens_q, cu_seqlens_k: [N + 1] int64 on the CPU: a packed batch (B = 1, no masks, causal_offset
            0). Sequence s is query rows cu_seqlens_q[s]:cu_seqlens_q[s+1] against key rows
            cu_seqlens_k[s]:cu_seqlens_k[s+1], with its own bottom-right diagonal, as flash_attn_varlen_func.

    The masks, is_causal and the window combine: a pair is used only if every one of them allows it. A query
    with no allowed key gets a zero output row (not NaN) and zero gradients.

    Returns:
        (output, logsumexp): output [B, H, Tq, d_v] in the inputs' dtype, a [B, Tq, H, d_v] buffer seen through
        a transpose (output.transpose(1, 2).reshape(B, Tq, H * d_v) is free; call .contiguous() before a .view
        of another shape); logsumexp [B, H, Tq] of the scaled,
        masked scores, the sink included, float32 (float64 for float64 inputs); -inf for a query with no key.
        Only output is differentiable: logsumexp carries no gradient (requires_grad False), as in PyTorch's
        own flash attention, so a loss that uses it gets none through it.

    Under torch.compile(dynamic=True) the sizes and causal_offset (a SymInt of the schema) stay symbolic, so
    decoding against a growing cache with causal_offset = Tk - Tq runs one graph. The window sizes are plain
    integers (a model's constants): each new value compiles a new graph.
    """
    _require_tensors("flash_attention", query=query, key=key, value=value)
    return torch.ops.attn.flash_attention(
        query, key, value, key_padding_mask, attend_mask, additive_mask, is_causal, causal_offset, scale,
        window_left, window_right, softcap, alibi_slopes, sinks, cu_seqlens_q, cu_seqlens_k)


def decode_attention(query: Tensor, key_cache: Tensor, value_cache: Tensor, query_starts: Tensor,
                     key_lengths: Tensor, *,
                     is_causal: bool = True,
                     scale: Optional[float] = None,
                     window_left: int = -1,
                     window_right: int = -1,
                     softcap: float = 0.0,
                     alibi_slopes: Optional[Tensor] = None,
                     sinks: Optional[Tensor] = None,
                     key_scales: Optional[Tensor] = None,
                     value_scales: Optional[Tensor] = None,
                     block_table: Optional[Tensor] = None,
                     tree_mask: Optional[Tensor] = None) -> Tensor:
    """A few new queries per sequence against a KV cache read in place: torch.ops.attn.decode_attention.

    The keys are split across threads (FlashDecoding's scheme). An inference kernel: not differentiable.

    Args:
        query: [B, H, Tq, d_k]. key_cache: [B, H_kv, capacity, d_k]. value_cache: [B, H_kv, capacity, d_v].
            H_kv divides H; query head h reads cache head h // (H // H_kv). float32, float64 or bfloat16 on
            the CPU (the query and caches alike; bfloat16 computed in float32); float32, float16 or bfloat16 on
            CUDA (d_k = d_v <= 256, compute capability 8.0 or newer).
        query_starts: [B] integers (int64, int32, ...): query t of row b sits at position query_starts[b] + t.
        key_lengths: [B] integers: row b's cache holds keys 0 .. key_lengths[b] - 1; later slots are ignored.
        is_causal: query at position p attends key j only if j <= p (besides j < key_lengths[b]).
        scale: multiplies q·k; None is 1 / sqrt(d_k).
        window_left, window_right: key j allowed only if p - window_left <= j <= p + window_right; -1 unbounded.
        softcap, alibi_slopes, sinks: as in flash_attention, around each query's position p.
        key_scales, value_scales: float32 [B, H_kv, capacity], with int8 caches: row (b, h, j) stands for
            scales[b, h, j] times its int8 elements (the query is then float32 or bfloat16). CPU only.
        block_table: [B, max_blocks] integers, with paged caches [num_blocks, H_kv, block_size, d]: block
            block_table[b, i] holds row b's positions i·block_size .. (i+1)·block_size - 1. CPU only.
        tree_mask: bool [Tq, Tq] or [B, Tq, Tq], token-tree verification: candidate t attends the positions
            before query_starts[b] and the candidates u with tree_mask[t, u]. Needs is_causal; no window or
            ALiBi. CPU only.

    Returns:
        [B, H, Tq, d_v] in the query's dtype; a query with no allowed key gets a zero row.
    """
    _require_tensors("decode_attention", query=query, key_cache=key_cache, value_cache=value_cache,
                     query_starts=query_starts, key_lengths=key_lengths)
    return torch.ops.attn.decode_attention(
        query, key_cache, value_cache, query_starts, key_lengths, is_causal, scale, window_left, window_right,
        softcap, alibi_slopes, sinks, key_scales, value_scales, block_table, tree_mask)


def linear_rows(input: Tensor, weight: Tensor, bias: Optional[Tensor] = None) -> Tensor:
    """input · weightᵀ + bias for at most 16 rows of input: torch.ops.attn.linear_rows.

    The product of a decoding step: each weight row is read once, in order, and multiplied with every row of
    input, with float32 sums. An inference kernel: not differentiable.

    Args:
        input: [..., in_features] with at most 16 rows (input.numel() / in_features).
        weight: [out_features, in_features] (a weight whose rows are not contiguous is copied first).
        bias: [out_features] or None.
        The three are float32, or all bfloat16, on the CPU.

    Returns:
        [..., out_features], as torch.nn.functional.linear(input, weight, bias).
    """
    _require_tensors("linear_rows", input=input, weight=weight)
    return torch.ops.attn.linear_rows(input, weight, bias)
