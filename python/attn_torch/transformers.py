"""attn as an attention implementation of Hugging Face transformers (AttentionInterface).

    import attn_torch.transformers
    attn_torch.transformers.register()            # name "attn"
    model = AutoModelForCausalLM.from_pretrained(..., attn_implementation="attn")

register() adds two functions under the same name: `attention_forward`, which transformers' attention layers
call instead of sdpa_attention_forward, and `attention_mask`, which transformers' masking_utils calls to
build the mask those layers receive. The mask is transformers' SDPA mask (bool, True = may attend, [B, 1, Tq,
Tk]), and None where the mask is purely causal with the queries at the end of the keys, so the common case
(a prompt without padding, then decoding one token at a time) passes no mask to the kernel at all.
"""
import torch

from . import ops

__all__ = ["register", "attention_forward", "attention_mask", "DEFAULT_NAME"]

#: The name register() uses by default: from_pretrained(..., attn_implementation="attn").
DEFAULT_NAME = "attn"


def _refuse(name, why):
    raise ValueError(f"attn_torch.transformers.attention_forward: {name} {why}")


def attention_forward(module, query, key, value, attention_mask, dropout=0.0, scaling=None, is_causal=None,
                      sliding_window=None, softcap=None, s_aux=None, **kwargs):
    """transformers' attention function signature, computed by torch.ops.attn.flash_attention.

    Args (as transformers' attention layers pass them):
        module: the attention layer; its `is_causal` (default True) and `training` are read.
        query [B, H, Tq, d], key [B, H_kv, Tk, d], value [B, H_kv, Tk, d_v]: H_kv dividing H. The kernel
            reads each key/value head for its H // H_kv query heads; no repeat_kv copy is made.
        attention_mask: None, or a 4-D mask from transformers (or the caller), broadcastable to
            [B, H, Tq, Tk]: bool with True = may attend (transformers' SDPA format, which register() asks
            for), or floating and added to the scores (the eager format: -inf blocks; the dtype's minimum,
            which eager_mask uses, is finite and leaves a weight of 0 in practice, as in eager and SDPA).
            When a mask is given it holds causality, windows and padding, and is_causal and sliding_window
            are not applied again (as sdpa_attention_forward does).
        dropout: a probability; attn has no dropout. Nonzero while module.training raises ValueError; in eval
            mode it is ignored (transformers' layers pass 0.0 in eval mode).
        scaling: multiplies q·k; None is 1 / sqrt(d).
        is_causal: overrides module.is_causal. With no mask, a causal call aligns the diagonal bottom-right:
            query i is at position Tk - Tq + i, as after a KV cache of Tk - Tq keys (for Tq = 1: every key).
        sliding_window: W, with no mask and causal attention: each query sees its own and the W - 1 keys
            before it (transformers' sliding_window_causal_mask_function). With a mask it is in the mask.
            A non-causal call without a mask and with more than W keys raises ValueError (models define
            bidirectional windows differently).
        softcap: Gemma 2's attn_logit_softcapping: scores s become softcap · tanh(s / softcap); None or 0 off.
        s_aux: [H] sink logits (GPT-OSS's `sinks` parameter), differentiable.
        Other keyword arguments transformers passes (position_ids, cache_position, use_cache, ...) do not
        change attention and are ignored; these raise ValueError: position_bias (a relative bias: use
        sdpa or eager), cache (a PagedAttentionCache: continuous batching), cu_seq_lens_q / cu_seq_lens_k
        (packed sequences for flash_attention_2), output_attentions=True (attn computes no weights).

    Returns:
        (output [B, Tq, H, d_v] contiguous, None): the layout sdpa_attention_forward returns; no weights.
    """
    if kwargs.get("position_bias") is not None:
        _refuse("position_bias", "is not supported (a relative position bias per layer); use "
                "attn_implementation='sdpa' or 'eager' for this model")
    if kwargs.get("cache") is not None:
        _refuse("cache", "(a PagedAttentionCache, continuous batching) is not supported; use "
                "attn_implementation='sdpa' for continuous batching")
    for name in ("cu_seq_lens_q", "cu_seq_lens_k"):
        if kwargs.get(name) is not None:
            _refuse(name, "(packed sequences, a flash_attention_2 input) is not supported; pass padded "
                    "batches with an attention_mask")
    if kwargs.get("output_attentions", False):
        _refuse("output_attentions=True", "is not supported: attn's kernel never forms the attention "
                "weights; use attn_implementation='eager' to get them")
    if dropout and dropout > 0.0 and (module is None or module.training):
        _refuse(f"dropout={dropout}", "is not supported in training: attn's kernel has no dropout. Set the "
                "model's attention dropout to 0 in its config before building it (config.attention_dropout = 0.0 "
                "for Llama and most decoders, config.attention_probs_dropout_prob = 0.0 for BERT), call "
                "model.eval(), or use attn_implementation='sdpa'")
    if query.dim() != 4 or key.dim() != 4 or value.dim() != 4:
        _refuse("query/key/value", f"must be 4-D [B, H, T, d], got {tuple(query.shape)}, "
                f"{tuple(key.shape)}, {tuple(value.shape)}")

    causal = is_causal if is_causal is not None else getattr(module, "is_causal", True)
    q_length, kv_length = query.shape[2], key.shape[2]
    attend = additive = None
    window_left = window_right = -1
    if attention_mask is not None:
        if attention_mask.dim() != 4:
            _refuse("attention_mask", f"must be 4-D, broadcastable to [B, H, Tq, Tk] = "
                    f"[{query.shape[0]}, {query.shape[1]}, {q_length}, {kv_length}], got shape "
                    f"{tuple(attention_mask.shape)} (transformers' masking_utils makes the 4-D mask)")
        if attention_mask.dtype == torch.bool:
            attend = attention_mask
        elif attention_mask.is_floating_point():
            additive = attention_mask
        else:
            _refuse("attention_mask", f"must be bool (True = may attend) or floating (added to the scores), "
                    f"got {attention_mask.dtype}")
        causal = False  # the mask holds causality (and windows, padding), as in sdpa_attention_forward
    elif sliding_window is not None:
        if causal:
            window_left, window_right = int(sliding_window) - 1, 0
        elif kv_length > int(sliding_window):
            _refuse(f"sliding_window={sliding_window}", "without a mask is only taken with causal attention "
                    "(bidirectional windows are defined differently by each model); pass the mask that "
                    "transformers builds")
    sinks = s_aux
    if sinks is not None and sinks.dim() != 1:
        _refuse("s_aux", f"(sinks) must be [H] = [{query.shape[1]}], got shape {tuple(sinks.shape)}")

    output, _ = ops.flash_attention(
        query, key, value, attend_mask=attend, additive_mask=additive, is_causal=bool(causal),
        causal_offset=kv_length - q_length, scale=scaling, window_left=window_left, window_right=window_right,
        softcap=float(softcap) if softcap else 0.0, sinks=sinks)
    return output.transpose(1, 2).contiguous(), None


def attention_mask(batch_size, q_length, kv_length, q_offset=0, kv_offset=0, allow_is_causal_skip=True,
                   **kwargs):
    """The mask function registered for attn in transformers' AttentionMaskInterface.

    transformers' SDPA mask (masking_utils.sdpa_mask): bool [B, 1, Tq, Tk], True = may attend, or None. SDPA
    may skip a causal mask also when the queries start at position 0 of a longer key buffer (an empty
    StaticCache: top-left alignment); attn aligns a mask-less causal call bottom-right, so there the mask is
    built instead. Every None this returns means "causal, queries at the end of the keys" (Tq = 1 or
    Tq = Tk, no padding) or "no mask at all" (a bidirectional call without padding).
    """
    from transformers.masking_utils import sdpa_mask

    mask = sdpa_mask(batch_size=batch_size, q_length=q_length, kv_length=kv_length, q_offset=q_offset,
                     kv_offset=kv_offset, allow_is_causal_skip=allow_is_causal_skip, **kwargs)
    if mask is None and allow_is_causal_skip and q_length != 1 and q_length != kv_length:
        mask = sdpa_mask(batch_size=batch_size, q_length=q_length, kv_length=kv_length, q_offset=q_offset,
                         kv_offset=kv_offset, allow_is_causal_skip=False, **kwargs)
    return mask


def register(name=DEFAULT_NAME):
    """Registers attn with transformers under `name`: from_pretrained(..., attn_implementation=name).

    Adds attention_forward to transformers' AttentionInterface and attention_mask to its
    AttentionMaskInterface (without a mask function registered under the same name, transformers would
    build no mask at all for this implementation, and padding would be ignored). Returns `name`.
    """
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    AttentionInterface.register(name, attention_forward)
    AttentionMaskInterface.register(name, attention_mask)
    return name
