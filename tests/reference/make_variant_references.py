"""Attention-variant references computed by Hugging Face transformers' own attention code, for
tests/test_variants_transformers.cpp.

Run by the build in the LibTorch 2.x lane, whose Python has transformers (scripts/torch-pip.requirements):
  .venv-torch/bin/python tests/reference/make_variant_references.py --out build-torch-pip/tests/variants

Each case runs one model's attention as its modelling code does, on seeded float64 q, k, v, with small random
configs, and writes a dict with torch.save (the C++ test reads it with torch::pickle_load), listed in manifest.txt:

  variant_mistral_*   Mistral's sliding window: modeling_mistral.eager_attention_forward (MistralAttention as the
                      module: GQA groups, scaling) with the mask of masking_utils.create_sliding_window_causal_mask
                      (eager: 0 / finfo.min); the decode case takes the keys and the mask sizes from a DynamicCache
                      whose sliding layer holds only the last sliding_window - 1 keys
  variant_gemma2_*    Gemma 2: modeling_gemma2.eager_attention_forward with Gemma2Attention's scaling
                      (query_pre_attn_scalar ** -0.5) and softcap (attn_logit_softcapping), sliding or full layer
  variant_bloom_*     BLOOM's ALiBi: BloomAttention.forward itself (its q/k/v projection replaced by one that returns
                      the case's q, k, v, its output projection by the identity), build_alibi_tensor on an all-ones
                      attention mask and create_causal_mask, as BloomModel builds them; the decode case through a
                      DynamicCache holding the past keys
  variant_gptoss_*    GPT-OSS's attention sinks: modeling_gpt_oss.eager_attention_forward with GptOssAttention (its
                      sinks parameter set to the case's), full (causal) and sliding layers as the model alternates them
  alibi_slopes        BLOOM's slopes for several head counts (build_alibi_tensor's bias at key position 1):
                      heads [N] (int64) and slopes_<H> [H] (float32) for each

A case holds, besides the name, the model and the transformers version, the options as attn names them:
  causal (bool), window_left, window_right (int, -1 = unbounded), softcap (real, 0 = off), scale (real),
  alibi_slopes [H] (float32, as BLOOM computes them), sinks [H]
and the tensors, all in attn's layout [B, H, T, d] (transformers' eager functions return [B, T, H, d]):
  q [B, H, Tq, d], k, v [B, H_kv, Tk, d]            float64 inputs (for a cache case: the keys attention saw)
  grad_output [B, H, Tq, d]                         a fixed random cotangent
  out, grad_q, grad_k, grad_v, grad_sinks           transformers' output, and torch autograd through it
  float64_tol                                       what a float64 run can be held to: Mistral, Gemma 2 and BLOOM
                                                    run their softmax in float32 whatever the input dtype
                                                    (softmax(..., dtype=torch.float32).to(query.dtype)), so their
                                                    references are float32-accurate (BLOOM's ALiBi bias, float32
                                                    slopes times positions, is rounded to float32 too); GPT-OSS's
                                                    is float64 throughout

Before writing, every case is checked against attn's documented semantics written out plainly in float64
(band i + o - left <= j <= i + o + right with o = Tk - Tq, softcap c * tanh(s / c) before the bias and the masks,
ALiBi -slope * |i + o - j|, the sink as one more softmax column), output and gradients, with the metric of
attn::test::close; the script fails if they disagree.
"""
import argparse
import math
import os

import torch
import transformers
from torch import nn
from transformers import BloomConfig, Gemma2Config, GptOssConfig, MistralConfig
from transformers.cache_utils import DynamicCache
from transformers.masking_utils import create_causal_mask, create_sliding_window_causal_mask
from transformers.models.bloom import modeling_bloom as bloom
from transformers.models.gemma2 import modeling_gemma2 as gemma2
from transformers.models.gpt_oss import modeling_gpt_oss as gpt_oss
from transformers.models.mistral import modeling_mistral as mistral

from transformers_cases import write_cases

FLOAT32_SOFTMAX_TOL = 2e-6  # float64 runs against a reference whose softmax ran in float32
BLOOM_TOL = 5e-6            # BLOOM also forms its bias slope * j in float32 (float32 slopes times integer positions)
FLOAT64_TOL = 1e-10         # as the PyTorch references (docs/testing.md)


def close_error(actual, expected):
    """attn::test::close's metric: max |actual - expected| / (|expected| + max|expected|)."""
    actual, expected = actual.detach().double(), expected.detach().double()
    scale = expected.abs() + expected.abs().max()
    return float(((actual - expected).abs() / scale).max())


def plain_attention(q, k, v, scale, causal, left, right, softcap=0.0, slopes=None, sinks=None):
    """attn's documented semantics in float64, from the definitions (options.h), GQA by repeating K/V heads."""
    groups = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(groups, 1), v.repeat_interleave(groups, 1)
    tq, tk = q.shape[-2], k.shape[-2]
    s = q @ k.transpose(-2, -1) * scale
    if softcap > 0:
        s = softcap * torch.tanh(s / softcap)
    rel = torch.arange(tk)[None, :] - torch.arange(tq)[:, None] - (tk - tq)  # j - i - o, bottom-right
    if slopes is not None:
        s = s - slopes.to(s.dtype).view(1, -1, 1, 1) * rel.abs().to(s.dtype)
    if causal:
        right = 0 if right < 0 else min(right, 0)
    allowed = torch.ones(tq, tk, dtype=torch.bool)
    if left >= 0:
        allowed &= rel >= -left
    if right >= 0:
        allowed &= rel <= right
    assert bool(allowed.any(-1).all()), "every query keeps a key in these cases"
    s = s.masked_fill(~allowed, -math.inf)
    if sinks is not None:
        column = sinks.view(1, -1, 1, 1).expand(*s.shape[:-1], 1)
        p = torch.softmax(torch.cat([s, column], -1), -1)[..., :-1]
    else:
        p = torch.softmax(s, -1)
    return p @ v


def self_check(case):
    """Output and gradients of plain_attention in float64 against the case's transformers reference."""
    leaves = {key: case[key].detach().clone().requires_grad_(True) for key in ("q", "k", "v", "sinks") if key in case}
    out = plain_attention(leaves["q"], leaves["k"], leaves["v"], case["scale"], case["causal"], case["window_left"],
                          case["window_right"], case["softcap"], case.get("alibi_slopes"), leaves.get("sinks"))
    out.backward(case["grad_output"])
    errors = {"out": close_error(out, case["out"])}
    for key, leaf in leaves.items():
        errors["grad_" + key] = close_error(leaf.grad, case["grad_" + key])
    worst = max(errors.values())
    # A wrong mapping (a window one key off, a sign, a missing softcap) moves results by 1e-3 or more.
    assert worst < case["float64_tol"] / 4, (case["name"], errors)
    return worst


def seeded_inputs(seed, batch, heads, kv_heads, tq, tk, head_dim, q_scale=1.0):
    gen = torch.Generator().manual_seed(seed)
    def randn(*shape):
        return torch.randn(*shape, generator=gen, dtype=torch.float64)
    q = randn(batch, heads, tq, head_dim) * q_scale
    k, v = randn(batch, kv_heads, tk, head_dim), randn(batch, kv_heads, tk, head_dim)
    grad_output = randn(batch, heads, tq, head_dim)
    return gen, q, k, v, grad_output


def leaves(*tensors):
    return [t.detach().clone().requires_grad_(True) for t in tensors]


def eager_case(module, eager_fn, q, k, v, grad_output, mask, **kwargs):
    """Runs a model's eager_attention_forward and autograd through it; returns out [B, H, T, d] and the grads."""
    ql, kl, vl = leaves(q, k, v)
    out, _ = eager_fn(module, ql, kl, vl, mask, dropout=0.0, **kwargs)
    out = out.transpose(1, 2)  # [B, T, H, d] -> [B, H, T, d]
    out.backward(grad_output)
    return dict(q=q, k=k, v=v, grad_output=grad_output, out=out.detach(), grad_q=ql.grad, grad_k=kl.grad,
                grad_v=vl.grad)


def mistral_config(heads, kv_heads, head_dim, window):
    config = MistralConfig(hidden_size=heads * head_dim, num_attention_heads=heads, num_key_value_heads=kv_heads,
                           head_dim=head_dim, sliding_window=window, num_hidden_layers=1)
    config._attn_implementation = "eager"
    return config


def mistral_prefill_case(seed, batch, heads, kv_heads, seq, head_dim, window):
    """A prompt of seq > window tokens, no cache: the sliding-window causal mask over all of it."""
    config = mistral_config(heads, kv_heads, head_dim, window)
    module = mistral.MistralAttention(config, layer_idx=0).eval()
    _, q, k, v, grad_output = seeded_inputs(seed, batch, heads, kv_heads, seq, seq, head_dim)
    embeds = torch.zeros(batch, seq, config.hidden_size, dtype=torch.float64)
    mask = create_sliding_window_causal_mask(config=config, inputs_embeds=embeds, attention_mask=None,
                                             past_key_values=None)
    case = eager_case(module, mistral.eager_attention_forward, q, k, v, grad_output, mask, scaling=module.scaling)
    return dict(case, model="mistral", causal=True, window_left=window - 1, window_right=0, softcap=0.0,
                scale=float(module.scaling), float64_tol=FLOAT32_SOFTMAX_TOL)


def mistral_decode_case(seed, batch, heads, kv_heads, past, new, head_dim, window):
    """`new` tokens after `past` ones, through a DynamicCache: its sliding layer keeps the last window - 1 keys,
    so attention sees window - 1 + new keys and the mask's kv_offset is past - window + 1 (bottom-right in attn)."""
    config = mistral_config(heads, kv_heads, head_dim, window)
    module = mistral.MistralAttention(config, layer_idx=0).eval()
    _, q, k_all, v_all, grad_output = seeded_inputs(seed, batch, heads, kv_heads, new, past + new, head_dim)
    cache = DynamicCache(config=config)
    assert type(cache.layers[0]).__name__ == "DynamicSlidingWindowLayer", cache.layers
    cache.update(k_all[:, :, :past], v_all[:, :, :past], 0)
    embeds = torch.zeros(batch, new, config.hidden_size, dtype=torch.float64)
    mask = create_sliding_window_causal_mask(config=config, inputs_embeds=embeds, attention_mask=None,
                                             past_key_values=cache)
    k, v = cache.update(k_all[:, :, past:], v_all[:, :, past:], 0)  # the keys attention sees
    assert k.shape[-2] == window - 1 + new and mask.shape[-2:] == (new, k.shape[-2]), (k.shape, mask.shape)
    case = eager_case(module, mistral.eager_attention_forward, q, k, v, grad_output, mask, scaling=module.scaling)
    return dict(case, model="mistral", causal=True, window_left=window - 1, window_right=0, softcap=0.0,
                scale=float(module.scaling), float64_tol=FLOAT32_SOFTMAX_TOL)


def layer_mask(config, module, layer_type, batch, seq, window):
    """The mask transformers builds for a layer of this type (sliding-window causal or causal), with the left
    window side attn takes for it: sliding_window W keeps W keys, window(W - 1, 0)."""
    embeds = torch.zeros(batch, seq, config.hidden_size, dtype=torch.float64)
    mask_kwargs = dict(config=config, inputs_embeds=embeds, attention_mask=None, past_key_values=None)
    if layer_type == "sliding_attention":
        assert module.sliding_window == window
        return create_sliding_window_causal_mask(**mask_kwargs), window - 1
    assert module.sliding_window is None
    return create_causal_mask(**mask_kwargs), -1


def gemma2_case(seed, batch, heads, kv_heads, seq, head_dim, window, softcap, query_pre_attn_scalar, layer_type,
                q_scale):
    """Gemma 2's eager attention: scores * query_pre_attn_scalar ** -0.5, then softcap * tanh(scores / softcap),
    then the layer's mask (sliding window on even layers, causal on odd ones)."""
    config = Gemma2Config(hidden_size=heads * head_dim, num_attention_heads=heads, num_key_value_heads=kv_heads,
                          head_dim=head_dim, num_hidden_layers=2, sliding_window=window,
                          attn_logit_softcapping=softcap, query_pre_attn_scalar=query_pre_attn_scalar)
    config._attn_implementation = "eager"
    layer_idx = config.layer_types.index(layer_type)
    module = gemma2.Gemma2Attention(config, layer_idx=layer_idx).eval()
    _, q, k, v, grad_output = seeded_inputs(seed, batch, heads, kv_heads, seq, seq, head_dim, q_scale)
    mask, left = layer_mask(config, module, layer_type, batch, seq, window)
    case = eager_case(module, gemma2.eager_attention_forward, q, k, v, grad_output, mask, scaling=module.scaling,
                      sliding_window=module.sliding_window, softcap=module.attn_logit_softcapping)
    # The scores must reach the tanh's curved part, or softcap would go untested.
    scores = (q @ k.repeat_interleave(heads // kv_heads, 1).transpose(-2, -1)) * module.scaling
    assert float(scores.abs().max()) > 2 * softcap, float(scores.abs().max())
    return dict(case, model="gemma2", causal=True, window_left=left, window_right=0 if left >= 0 else -1,
                softcap=float(module.attn_logit_softcapping), scale=float(module.scaling),
                float64_tol=FLOAT32_SOFTMAX_TOL)


class FusedQKV(nn.Module):
    """Stands in for BloomAttention.query_key_value: returns the case's q, k, v in BLOOM's fused layout
    [B, T, H * 3 * d] (per head: q, k, v), which BloomAttention._reshape splits back."""

    def __init__(self, q, k, v):
        super().__init__()
        self.qkv = (q, k, v)

    def forward(self, hidden_states):
        q, k, v = (t.transpose(1, 2) for t in self.qkv)  # [B, T, H, d]
        fused = torch.stack([q, k, v], dim=3)  # [B, T, H, 3, d]
        return fused.reshape(*fused.shape[:2], -1)


def bloom_case(seed, batch, heads, past, new, head_dim):
    """BloomAttention.forward on `new` tokens after `past` cached ones (past 0: a prompt), ALiBi from
    build_alibi_tensor on an all-ones attention mask of past + new tokens, mask from create_causal_mask: as
    BloomModel.forward prepares them. BLOOM's bias is slope * j (key position), attn's -slope * |i + o - j|: equal
    under causality up to -slope * (i + o), a per-row constant that the softmax drops."""
    config = BloomConfig(hidden_size=heads * head_dim, n_head=heads, n_layer=1, attention_dropout=0.0,
                         hidden_dropout=0.0)
    config._attn_implementation = "eager"
    module = bloom.BloomAttention(config, layer_idx=0).eval()
    _, q, k_all, v_all, grad_output = seeded_inputs(seed, batch, heads, heads, new, past + new, head_dim)
    ql, kl, vl = leaves(q, k_all, v_all)
    cache = None
    if past:
        cache = DynamicCache()
        cache.update(kl[:, :, :past], vl[:, :, :past], 0)
    attention_mask = torch.ones(batch, past + new, dtype=torch.long)
    embeds = torch.zeros(batch, new, config.hidden_size, dtype=torch.float64)
    alibi = bloom.build_alibi_tensor(attention_mask, heads, dtype=torch.float64)
    mask = create_causal_mask(config=config, inputs_embeds=embeds, attention_mask=attention_mask,
                              past_key_values=cache)
    assert mask.shape[-2:] == (new, past + new), mask.shape
    module.query_key_value = FusedQKV(ql, kl[:, :, past:], vl[:, :, past:])
    module.dense = nn.Identity()
    out, _ = module(embeds, torch.zeros_like(embeds), alibi, mask, layer_past=cache)
    out = out.view(batch, new, heads, head_dim).transpose(1, 2)
    out.backward(grad_output)
    slopes = bloom.build_alibi_tensor(torch.ones(1, 2, dtype=torch.long), heads, torch.float32)[:, 0, 1]
    return dict(model="bloom", q=q, k=k_all, v=v_all, grad_output=grad_output, out=out.detach(), grad_q=ql.grad,
                grad_k=kl.grad, grad_v=vl.grad, alibi_slopes=slopes.clone(), causal=True, window_left=-1,
                window_right=-1, softcap=0.0, scale=float(module.inv_norm_factor), float64_tol=BLOOM_TOL)


def gptoss_case(seed, batch, heads, kv_heads, seq, head_dim, window, layer_type):
    """GPT-OSS's eager attention with GptOssAttention's sinks: one learned logit per head that joins each row's
    softmax and is dropped; GPT-OSS alternates sliding-window and full (causal) layers."""
    config = GptOssConfig(hidden_size=heads * head_dim, num_attention_heads=heads, num_key_value_heads=kv_heads,
                          head_dim=head_dim, num_hidden_layers=2, sliding_window=window, num_local_experts=4)
    config._attn_implementation = "eager"
    layer_idx = config.layer_types.index(layer_type)
    module = gpt_oss.GptOssAttention(config, layer_idx=layer_idx).eval()
    gen, q, k, v, grad_output = seeded_inputs(seed, batch, heads, kv_heads, seq, seq, head_dim)
    # Sinks from -2 to 4: from negligible to taking most of a row.
    sinks = torch.linspace(-2.0, 4.0, heads, dtype=torch.float64)[torch.randperm(heads, generator=gen)]
    module.sinks = nn.Parameter(sinks.clone())
    mask, left = layer_mask(config, module, layer_type, batch, seq, window)
    case = eager_case(module, gpt_oss.eager_attention_forward, q, k, v, grad_output, mask, scaling=module.scaling,
                      sliding_window=module.sliding_window)
    return dict(case, model="gpt_oss", sinks=sinks, grad_sinks=module.sinks.grad.detach().clone(), causal=True,
                window_left=left, window_right=0 if left >= 0 else -1, softcap=0.0, scale=float(module.scaling),
                float64_tol=FLOAT64_TOL)


SLOPE_HEADS = [1, 2, 3, 4, 5, 6, 7, 8, 12, 16, 20, 24, 32, 40, 48, 64, 96, 112]


def slopes_case():
    """BLOOM's slopes (what build_alibi_tensor multiplies key position 1 by), float32 as BLOOM computes them."""
    case = {"heads": torch.tensor(SLOPE_HEADS, dtype=torch.int64)}
    for h in SLOPE_HEADS:
        case[f"slopes_{h}"] = bloom.build_alibi_tensor(torch.ones(1, 2, dtype=torch.long), h, torch.float32)[:, 0, 1]
    return case


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="directory to write CASE.pt files and manifest.txt into")
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    cases = {
        # T = 300 > window 64, 4 query heads on 2 KV heads.
        "variant_mistral_sliding_gqa": mistral_prefill_case(11, 2, 4, 2, 300, 32, 64),
        # 7 new tokens after 293 cached: 63 kept + 7 = 70 keys, bottom-right.
        "variant_mistral_sliding_decode": mistral_decode_case(12, 2, 4, 2, 293, 7, 32, 64),
        # A softcap small enough that the tanh bends the scores (Gemma 2's is 50 on larger scores), and
        # query_pre_attn_scalar != head_dim so the scale is not the default.
        "variant_gemma2_softcap_sliding": gemma2_case(21, 2, 4, 2, 200, 32, 48, 5.0, 24, "sliding_attention", 2.0),
        "variant_gemma2_softcap_full": gemma2_case(22, 2, 4, 2, 90, 16, 48, 3.0, 16, "full_attention", 2.0),
        "variant_bloom_alibi_h8": bloom_case(31, 2, 8, 0, 40, 16),
        # 6 new tokens after 39 cached, 12 heads (not a power of two: the interleaved slopes).
        "variant_bloom_alibi_h12_decode": bloom_case(32, 2, 12, 39, 6, 16),
        "variant_gptoss_sinks_full": gptoss_case(41, 2, 4, 2, 100, 32, 32, "full_attention"),
        "variant_gptoss_sinks_sliding": gptoss_case(42, 2, 4, 2, 100, 32, 32, "sliding_attention"),
    }
    for name, case in cases.items():
        case["name"] = name
        case["transformers_version"] = transformers.__version__
        worst = self_check(case)
        print(f"{name}: transformers against the plain float64 formula: max error {worst:.2e} "
              f"(float64 tolerance {case['float64_tol']:.0e})")
    cases["alibi_slopes"] = slopes_case()
    write_cases(args.out, cases, "variant")


if __name__ == "__main__":
    main()
