#!/usr/bin/python3
"""Seeded reference outputs for attn's parity tests, computed by PyTorch.

Run by the build (tests/CMakeLists.txt) with /usr/bin/python3, which has Debian's python3-torch:

    /usr/bin/python3 tests/reference/make_references.py --out build/tests/reference

Every case is one file CASE.pt, a plain dict saved with torch.save (LibTorch's torch::pickle_load reads it),
and manifest.txt lists the cases. A case holds its configuration (ints, bools, floats, strings), its inputs
in float64, and for each of float32 and float64 the outputs and input gradients that PyTorch computes from
those inputs cast to that dtype. Nothing here comes from attn's own code.

Sources of truth, by kind:
  sdpa   torch.nn.functional.scaled_dot_product_attention by its math backend (F._scaled_dot_product_attention
         on 1.13) wherever every query keeps a key, with the masks (causal included) passed as F's own bool
         attn_mask. Where F gives NaN (rows with no allowed key) an explicit formula in PyTorch ops states the
         documented semantics (zeros); it is itself checked against F wherever both are defined. NaN at masked
         keys: F on the same inputs with those entries zeroed (PyTorch would let the NaN through).
  mha    torch.nn.MultiheadAttention(batch_first=True), masks in PyTorch's own conventions.
  head, cross   F.linear projections and F's attention (the explicit formula where a row keeps no key)
         for one head / cross-attention with given weights.
  nb001, nb003, nb004   the notebooks' own classes, built from the notebooks' seeds.
"""
import argparse
import contextlib
import copy
import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

DTYPES = {"float32": torch.float32, "float64": torch.float64}


# ----------------------------------------------------------------------------------------------- helpers

def math_backend():
    """PyTorch's math SDPA backend, its definition of attention (the only one 1.13 has). 2.x's fused CPU kernel
    rounds differently: where a gradient is exactly zero (one key: softmax is exactly 1) it gives ~1e-7 noise,
    which no tolerance relative to the reference's own scale can hold."""
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
    except ImportError:  # no backend to choose (1.13 has the math one only)
        return contextlib.nullcontext()
    return sdpa_kernel(SDPBackend.MATH)


def torch_sdpa(q, k, v, attn_mask, scale):
    """PyTorch's own functional attention (bool mask: True = may attend; float mask: added), math backend."""
    with math_backend():
        return torch_sdpa_any_version(q, k, v, attn_mask, scale)


def torch_sdpa_any_version(q, k, v, attn_mask, scale):
    if hasattr(F, "scaled_dot_product_attention"):
        try:
            return F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, scale=scale)
        except TypeError:  # 2.0 has no scale argument
            pass
    if scale is not None:
        q = q * (scale * math.sqrt(q.shape[-1]))  # F divides by sqrt(d_k); pre-scale to get `scale`
    fn = getattr(F, "scaled_dot_product_attention", None)
    if fn is not None:
        return fn(q, k, v, attn_mask=attn_mask)
    return F._scaled_dot_product_attention(q, k, v, attn_mask, 0.0, False, False)[0]


def causal_allowed(tq, tk, alignment):
    """True where query i may see key j. bottom_right: j <= i + (Tk - Tq); top_left: j <= i."""
    offset = tk - tq if alignment == "bottom_right" else 0
    return torch.ones(tq, tk, dtype=torch.bool).tril(diagonal=offset)


def allowed_pairs(q, k, kpm, attend, additive, causal, alignment):
    """attn's documented mask semantics as one bool 'may attend' tensor broadcast to [..., Tq, Tk]."""
    shape = list(q.shape[:-1]) + [k.shape[-2]]
    allowed = torch.ones(shape, dtype=torch.bool)
    if kpm is not None:
        allowed = allowed & ~kpm.unsqueeze(-2)
    if attend is not None:
        allowed = allowed & attend
    if additive is not None:
        allowed = allowed & ~torch.isneginf(additive)
    if causal:
        allowed = allowed & causal_allowed(q.shape[-2], k.shape[-2], alignment)
    return allowed


def explicit_sdpa(q, k, v, kpm=None, attend=None, additive=None, causal=False, alignment="bottom_right",
                  scale=None):
    """softmax(q kᵀ·scale + additive) v over the allowed pairs; a row with no allowed key gives zeros."""
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    scores = (q @ k.transpose(-2, -1)) * scale
    if additive is not None:
        scores = scores + additive
    allowed = allowed_pairs(q, k, kpm, attend, additive, causal, alignment)
    row_any = allowed.any(-1, keepdim=True)
    # Finite scores on empty rows keep softmax (and its gradient) NaN-free; their weights are then zeroed.
    scores = scores.masked_fill(~allowed, float("-inf")).masked_fill(~row_any, 0.0)
    weights = torch.softmax(scores, -1).masked_fill(~row_any, 0.0)
    return weights @ v, weights


def with_grads(fn, inputs, cotangent):
    """Runs fn on fresh leaf copies of inputs; returns (outputs, grads of sum(out * cotangent))."""
    leaves = [t.detach().clone().requires_grad_(True) for t in inputs]
    outs = fn(*leaves)
    out = outs[0] if isinstance(outs, tuple) else outs
    (out * cotangent.to(out.dtype)).sum().backward()
    return outs, [t.grad for t in leaves]


def bool_mask(shape, density, gen, keep_rows_nonempty=True):
    m = torch.rand(shape, generator=gen) < density
    if keep_rows_nonempty:
        m[..., 0] = True
    return m


# ------------------------------------------------------------------------------------------------- cases

class Writer:
    def __init__(self, out_dir):
        self.out_dir = out_dir
        self.names = []

    def save(self, name, case):
        assert name not in self.names, name
        case["name"] = name
        torch.save(case, os.path.join(self.out_dir, name + ".pt"))
        self.names.append(name)

    def close(self):
        with open(os.path.join(self.out_dir, "manifest.txt"), "w") as f:
            f.write("\n".join(self.names) + "\n")


def sdpa_case(w, name, seed, batch, tq, tk, dk, dv, kpm=False, attend=None, additive=False, causal=False,
              alignment="bottom_right", scale=None, nan_at_padding=False, empty_rows=False):
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(batch + [tq, dk], generator=gen, dtype=torch.float64)
    k = torch.randn(batch + [tk, dk], generator=gen, dtype=torch.float64)
    v = torch.randn(batch + [tk, dv], generator=gen, dtype=torch.float64)
    case = {"kind": "sdpa", "causal": causal, "alignment": alignment, "q": q, "k": k, "v": v}
    if scale is not None:
        case["scale"] = float(scale)
    masks = {}
    if kpm:
        # key padding over [B, 1, Tk] (broadcast over heads); the last keys of batch 0 are padding.
        pad = torch.zeros(batch[:1] + [1] * (len(batch) - 1) + [tk], dtype=torch.bool)
        pad[0, ..., tk - max(1, tk // 3):] = True
        if empty_rows and batch[0] > 1:
            pad[1] = True  # every key of batch 1 is padding: its rows attend to nothing -> zeros
        masks["key_padding_mask"] = pad
    if attend == "2d":
        masks["attend_mask"] = bool_mask([tq, tk], 0.6, gen, keep_rows_nonempty=not empty_rows)
        if empty_rows:
            masks["attend_mask"][0] = False
    elif attend == "full":
        masks["attend_mask"] = bool_mask(batch + [tq, tk], 0.5, gen)
    if additive:
        add = torch.randn([tq, tk], generator=gen, dtype=torch.float64)
        add[torch.rand([tq, tk], generator=gen) < 0.2] = float("-inf")
        add[:, 0] = 0.0
        masks["additive_mask"] = add
    case.update(masks)

    if nan_at_padding:
        # NaN in keys and values that are padding for every query: they must not reach the output. PyTorch's
        # own attention lets them through (0 * NaN in the product), so the reference is the same attention
        # on inputs with those entries zeroed, which is what "masked keys contribute nothing" means.
        assert kpm
        hole = masks["key_padding_mask"].unsqueeze(-1)  # [B, 1, Tk, 1]: whole rows of k and v
        case["k"] = k.masked_fill(hole, float("nan"))
        case["v"] = v.masked_fill(hole, float("nan"))

    # Causal (either alignment) is folded into the mask F receives, so F is defined wherever every query
    # keeps at least one key.
    allowed = allowed_pairs(q, k, masks.get("key_padding_mask"), masks.get("attend_mask"),
                            masks.get("additive_mask"), causal, alignment)
    f_defined = bool(allowed.any(-1).all())

    gen_ct = torch.Generator().manual_seed(seed + 1)
    cot = torch.randn(batch + [tq, dv], generator=gen_ct, dtype=torch.float64)
    for dname, dt in DTYPES.items():
        inputs = [t.to(dt) for t in (q, k, v)]  # clean inputs; the NaN ones only go to attn
        cast = {key: (m.to(dt) if m.is_floating_point() else m) for key, m in masks.items()}

        def explicit(qq, kk, vv):
            return explicit_sdpa(qq, kk, vv, cast.get("key_padding_mask"), cast.get("attend_mask"),
                                 cast.get("additive_mask"), causal, alignment, scale)

        (out, weights), grads = with_grads(explicit, inputs, cot)
        if f_defined:
            # Without an additive part, F gets attn's bool masks as its own bool attn_mask: that pins the
            # convention (True = may attend) directly against F. With one, everything folds into a float mask.
            f_mask = None
            if "additive_mask" in cast:
                f_mask = torch.zeros(allowed.shape, dtype=dt).masked_fill(~allowed, float("-inf"))
                f_mask = f_mask + cast["additive_mask"].masked_fill(torch.isneginf(cast["additive_mask"]), 0.0)
            elif masks or causal:
                f_mask = allowed
            f_out, f_grads = with_grads(lambda a, b, c: torch_sdpa(a, b, c, f_mask, scale), inputs, cot)
            tol = 1e-5 if dt == torch.float32 else 1e-12
            assert torch.allclose(f_out, out, rtol=tol, atol=tol), (name, (f_out - out).abs().max())
            out, grads = f_out, f_grads  # F is the source of truth where it is defined
        case["out_" + dname] = out.detach()
        case["weights_" + dname] = weights.detach()
        if not nan_at_padding:
            for g, n in zip(grads, "qkv"):
                case["grad_%s_%s" % (n, dname)] = g
    case["cotangent"] = cot
    case["source"] = "F.scaled_dot_product_attention" if f_defined else "explicit formula"
    w.save(name, case)


def sdpa_cases(w):
    sdpa_case(w, "sdpa_basic", 1, [2, 3], 5, 5, 8, 8)
    sdpa_case(w, "sdpa_dk_ne_dv", 2, [2, 2], 7, 11, 16, 8)
    sdpa_case(w, "sdpa_unbatched_2d", 3, [], 5, 6, 4, 3)
    sdpa_case(w, "sdpa_scale_override", 4, [1, 2], 4, 6, 8, 8, scale=0.3)
    sdpa_case(w, "sdpa_key_padding", 5, [2, 3], 6, 9, 8, 5, kpm=True)
    sdpa_case(w, "sdpa_attend_mask_2d", 6, [2, 2], 6, 7, 8, 8, attend="2d")
    sdpa_case(w, "sdpa_attend_mask_full", 7, [2, 2], 5, 8, 4, 6, attend="full")
    sdpa_case(w, "sdpa_additive_mask", 8, [2, 2], 6, 7, 8, 8, additive=True)
    sdpa_case(w, "sdpa_causal_square", 9, [2, 2], 7, 7, 8, 8, causal=True)
    sdpa_case(w, "sdpa_causal_top_left_square", 10, [1, 2], 6, 6, 4, 4, causal=True, alignment="top_left")
    sdpa_case(w, "sdpa_causal_kv_cache", 11, [2, 2], 3, 9, 8, 8, causal=True)
    sdpa_case(w, "sdpa_causal_tq_gt_tk", 12, [1, 2], 7, 4, 8, 8, causal=True)
    sdpa_case(w, "sdpa_causal_top_left_rect", 13, [2, 1], 4, 9, 8, 8, causal=True, alignment="top_left")
    sdpa_case(w, "sdpa_fully_masked_rows", 14, [2, 2], 5, 6, 8, 8, kpm=True, attend="2d", empty_rows=True)
    sdpa_case(w, "sdpa_nan_at_padding", 15, [2, 2], 5, 7, 8, 8, kpm=True, nan_at_padding=True)
    sdpa_case(w, "sdpa_all_masks_causal", 16, [2, 2], 8, 8, 8, 6, kpm=True, attend="2d", additive=True,
              causal=True)
    sdpa_case(w, "sdpa_single_token", 17, [2, 1], 1, 1, 8, 8)
    sdpa_case(w, "sdpa_odd_sizes", 18, [3, 1], 13, 17, 5, 7, kpm=True)


def mha_case(w, name, seed, embed, heads, batch, tq, tk, bias=True, kdim=None, vdim=None, kpm=False,
             attn_mask=None, causal=False):
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    mha = nn.MultiheadAttention(embed, heads, bias=bias, kdim=kdim, vdim=vdim, batch_first=True,
                                dtype=torch.float64)
    with torch.no_grad():  # exercise every parameter, biases included (PyTorch zero-inits them)
        for p in mha.parameters():
            p.copy_(torch.randn(p.shape, generator=gen, dtype=torch.float64) * 0.3)
    kdim, vdim = kdim or embed, vdim or embed
    b = [batch] if batch else []
    query = torch.randn(b + [tq, embed], generator=gen, dtype=torch.float64)
    key = torch.randn(b + [tk, kdim], generator=gen, dtype=torch.float64)
    value = torch.randn(b + [tk, vdim], generator=gen, dtype=torch.float64)

    case = {"kind": "mha", "embed_dim": embed, "num_heads": heads, "bias": bias, "kdim": kdim, "vdim": vdim,
            "causal": causal, "query": query, "key": key, "value": value}
    E = embed
    if mha._qkv_same_embed_dim:
        wq, wk, wv = mha.in_proj_weight[:E], mha.in_proj_weight[E:2 * E], mha.in_proj_weight[2 * E:]
    else:
        wq, wk, wv = mha.q_proj_weight, mha.k_proj_weight, mha.v_proj_weight
    case.update({"w_q": wq.detach().clone(), "w_k": wk.detach().clone(), "w_v": wv.detach().clone(),
                 "w_o": mha.out_proj.weight.detach().clone()})
    if bias:
        ib = mha.in_proj_bias.detach()
        case.update({"b_q": ib[:E].clone(), "b_k": ib[E:2 * E].clone(), "b_v": ib[2 * E:].clone(),
                     "b_o": mha.out_proj.bias.detach().clone()})

    # Masks in PyTorch's conventions: key_padding_mask True = padding; bool attn_mask True = NOT allowed.
    torch_kpm, torch_mask = None, None
    if kpm:
        torch_kpm = torch.zeros(b + [tk], dtype=torch.bool)
        torch_kpm[..., tk - max(1, tk // 3):] = True
        if batch:
            torch_kpm[-1, :] = False
        case["torch_key_padding_mask"] = torch_kpm
    if causal:
        torch_mask = ~causal_allowed(tq, tk, "top_left")  # what attn's causal=True means when Tq == Tk
    elif attn_mask == "bool":
        torch_mask = ~bool_mask([tq, tk], 0.6, gen)
    elif attn_mask == "float":
        torch_mask = torch.randn([tq, tk], generator=gen, dtype=torch.float64)
    elif attn_mask == "bool3d":
        torch_mask = ~bool_mask([batch * heads, tq, tk], 0.6, gen)
    if torch_mask is not None and not causal:
        case["torch_attn_mask"] = torch_mask

    cot = torch.randn(b + [tq, E], generator=gen, dtype=torch.float64)
    case["cotangent"] = cot
    for dname, dt in DTYPES.items():
        model = copy.deepcopy(mha).to(dt)  # Module.to() works in place: keep the float64 original intact
        mask_dt = torch_mask.to(dt) if (torch_mask is not None and torch_mask.is_floating_point()) else torch_mask

        def run(qq, kk, vv):
            return model(qq, kk, vv, key_padding_mask=torch_kpm, attn_mask=mask_dt, need_weights=True,
                         average_attn_weights=True)

        (out, avg), grads = with_grads(run, [t.to(dt) for t in (query, key, value)], cot)
        with torch.no_grad():
            _, per_head = model(query.to(dt), key.to(dt), value.to(dt), key_padding_mask=torch_kpm,
                                attn_mask=mask_dt, need_weights=True, average_attn_weights=False)
        case["out_" + dname] = out.detach()
        case["weights_avg_" + dname] = avg.detach()
        case["weights_per_head_" + dname] = per_head.detach()
        for g, n in zip(grads, ("query", "key", "value")):
            case["grad_%s_%s" % (n, dname)] = g
    w.save(name, case)


def mha_cases(w):
    mha_case(w, "mha_basic", 21, 16, 4, 2, 5, 5)
    mha_case(w, "mha_no_bias", 22, 16, 4, 2, 5, 5, bias=False)
    mha_case(w, "mha_kdim_vdim", 23, 16, 2, 2, 4, 7, kdim=12, vdim=10)
    mha_case(w, "mha_unbatched", 24, 12, 3, 0, 6, 6)
    mha_case(w, "mha_key_padding", 25, 16, 4, 3, 5, 8, kpm=True)
    mha_case(w, "mha_bool_attn_mask", 26, 16, 4, 2, 6, 6, attn_mask="bool")
    mha_case(w, "mha_float_attn_mask", 27, 16, 4, 2, 6, 7, attn_mask="float")
    mha_case(w, "mha_3d_attn_mask", 28, 16, 4, 2, 5, 6, attn_mask="bool3d")
    mha_case(w, "mha_causal", 29, 16, 4, 2, 7, 7, causal=True)
    mha_case(w, "mha_single_head", 30, 8, 1, 2, 4, 4)
    mha_case(w, "mha_all_masks_kdim_vdim", 31, 16, 4, 2, 5, 9, kdim=6, vdim=11, kpm=True, attn_mask="bool",
             bias=False)
    mha_case(w, "mha_unbatched_key_padding", 32, 16, 2, 0, 4, 6, kpm=True, attn_mask="float")


def linear_params(gen, d_in, d_out, bias):
    wt = torch.randn(d_out, d_in, generator=gen, dtype=torch.float64) / math.sqrt(d_in)
    b = torch.randn(d_out, generator=gen, dtype=torch.float64) * 0.1 if bias else None
    return wt, b


def projected_case(w, kind, name, seed, d_q_in, d_kv_in, dk, dv, heads, batch, tq, tk, bias, causal=False,
                   kpm=False, empty_context=False, self_attention=False):
    """AttentionHead (heads == 1, one d_in) or CrossAttention: project, split heads, attend, concatenate."""
    gen = torch.Generator().manual_seed(seed)
    wq, bq = linear_params(gen, d_q_in, heads * dk, bias)
    wk, bk = linear_params(gen, d_kv_in, heads * dk, bias)
    wv, bv = linear_params(gen, d_kv_in, heads * dv, bias)
    b = [batch] if batch else []
    x = torch.randn(b + [tq, d_q_in], generator=gen, dtype=torch.float64)
    ctx = x if self_attention else torch.randn(b + [tk, d_kv_in], generator=gen, dtype=torch.float64)
    case = {"kind": kind, "d_q_in": d_q_in, "d_kv_in": d_kv_in, "d_k": dk, "d_v": dv, "num_heads": heads,
            "bias": bias, "causal": causal, "self_attention": self_attention, "x": x, "context": ctx,
            "w_q": wq, "w_k": wk, "w_v": wv}
    if bias:
        case.update({"b_q": bq, "b_k": bk, "b_v": bv})
    pad = None
    if kpm:
        pad = torch.zeros(b + [tk], dtype=torch.bool)
        pad[..., tk - max(1, tk // 3):] = True
        if empty_context and batch:
            pad[-1] = True
        case["key_padding_mask"] = pad

    sources = set()

    def run(xx, cc, dt):
        def lin(t, wt, bb):
            return F.linear(t, wt.to(dt), None if bb is None else bb.to(dt))

        def split(t, d):  # [.., T, H*d] -> [.., H, T, d]
            return t.reshape(t.shape[:-1] + (heads, d)).transpose(-3, -2)

        q, k, v = split(lin(xx, wq, bq), dk), split(lin(cc, wk, bk), dk), split(lin(cc, wv, bv), dv)
        p = None if pad is None else pad.unsqueeze(-2)  # [.., 1, Tk] broadcasts over heads
        out, weights = explicit_sdpa(q, k, v, kpm=p, causal=causal)
        # PyTorch's F is the source of truth wherever it is defined: every query has a key to attend to (the
        # bottom-right causal mask goes to F as its bool mask).
        allowed = allowed_pairs(q, k, p, None, None, causal, "bottom_right")
        if bool(allowed.any(-1).all()):
            f_out = torch_sdpa(q, k, v, allowed if (causal or p is not None) else None, None)
            tol = 1e-5 if dt == torch.float32 else 1e-12
            assert torch.allclose(f_out, out, rtol=tol, atol=tol), (name, (f_out - out).abs().max())
            out = f_out
            sources.add("F.scaled_dot_product_attention")
        else:
            sources.add("explicit formula")
        out = out.transpose(-3, -2)
        return out.reshape(out.shape[:-2] + (heads * dv,)), weights

    cot = torch.randn(b + [tq, heads * dv], generator=gen, dtype=torch.float64)
    case["cotangent"] = cot
    for dname, dt in DTYPES.items():
        (out, weights), grads = with_grads(lambda a, c: run(a, c, dt), [x.to(dt), ctx.to(dt)], cot)
        case["out_" + dname] = out.detach()
        case["weights_per_head_" + dname] = weights.detach()
        case["grad_x_" + dname] = grads[0]
        case["grad_context_" + dname] = grads[1]
    case["source"] = " + ".join(sorted(sources))
    w.save(name, case)


def head_and_cross_cases(w):
    projected_case(w, "head", "head_self", 41, 16, 16, 24, 28, 1, 2, 6, 6, bias=False, self_attention=True)
    projected_case(w, "head", "head_bias_causal", 42, 10, 10, 6, 6, 1, 2, 5, 5, bias=True, causal=True,
                   self_attention=True)
    projected_case(w, "head", "head_qkv_padding", 43, 8, 8, 5, 7, 1, 2, 4, 7, bias=False, kpm=True)
    projected_case(w, "head", "head_unbatched_kv_cache", 44, 8, 8, 6, 6, 1, 0, 3, 7, bias=True, causal=True)
    projected_case(w, "cross", "cross_single_head", 51, 16, 10, 8, 6, 1, 2, 5, 9, bias=False)
    projected_case(w, "cross", "cross_heads_padding", 52, 12, 20, 4, 5, 3, 3, 4, 6, bias=True, kpm=True,
                   empty_context=True)
    projected_case(w, "cross", "cross_unbatched", 53, 6, 9, 4, 4, 2, 0, 3, 5, bias=False, kpm=True)


# ------------------------------------------------------------------------------------------ notebook cases
# The notebooks' classes, verbatim in behaviour, run from the notebooks' seeds.

class Nb001Attention(nn.Module):  # seeds/001: Attention(d_model, row_dim, col_dim)
    def __init__(self, d_model, row_dim=0, col_dim=1):
        super().__init__()
        self.row_dim, self.col_dim = row_dim, col_dim
        self.W_q = nn.Linear(d_model, d_model, bias=False)
        self.W_k = nn.Linear(d_model, d_model, bias=False)
        self.W_v = nn.Linear(d_model, d_model, bias=False)

    def forward(self, q_enc, k_enc, v_enc, mask=None):
        q, k, v = self.W_q(q_enc), self.W_k(k_enc), self.W_v(v_enc)
        s = torch.matmul(q, k.transpose(dim0=self.row_dim, dim1=self.col_dim)) / k.shape[-1] ** 0.5
        if mask is not None:
            s = s.masked_fill(mask=mask, value=-1e9)
        return torch.softmax(s, dim=self.col_dim) @ v


class Nb001MultiHeadedAttention(nn.Module):
    def __init__(self, d_model, row_dim=0, col_dim=1, num_heads=1):
        super().__init__()
        self.col_dim = col_dim
        self.heads = nn.ModuleList([Nb001Attention(d_model, row_dim, col_dim) for _ in range(num_heads)])

    def forward(self, q_enc, k_enc, v_enc, mask=None):
        return torch.cat([h(q_enc, k_enc, v_enc, mask=None) for h in self.heads], dim=self.col_dim)


class Nb003MultiHeadAttention(nn.Module):  # seeds/003: multi_head_attention(d_model, n_head)
    def __init__(self, d_model, n_head):
        super().__init__()
        self.d_model, self.n_head = d_model, n_head
        self.w_q, self.w_k, self.w_v = nn.Linear(d_model, d_model), nn.Linear(d_model, d_model), nn.Linear(
            d_model, d_model)
        self.w_combine = nn.Linear(d_model, d_model)

    def forward(self, q, k, v, mask=None):
        batch, time, dimension = q.shape
        n_d = self.d_model // self.n_head
        q, k, v = self.w_q(q), self.w_k(k), self.w_v(v)
        q = q.view(batch, time, self.n_head, n_d).permute(0, 2, 1, 3)
        k = k.view(batch, time, self.n_head, n_d).permute(0, 2, 1, 3)
        v = v.view(batch, time, self.n_head, n_d).permute(0, 2, 1, 3)
        score = q @ k.transpose(2, 3) / math.sqrt(n_d)
        if mask is not None:
            score = score.masked_fill(mask == 0, -10000)
        score = torch.softmax(score, dim=-1) @ v
        score = score.permute(0, 2, 1, 3).contiguous().view(batch, time, dimension)
        return self.w_combine(score)


class Nb004SelfAttention(nn.Module):  # seeds/004: SelfAttention(embed_size)
    def __init__(self, embed_size):
        super().__init__()
        self.embed_size = embed_size
        self.query, self.key, self.value = (nn.Linear(embed_size, embed_size), nn.Linear(embed_size, embed_size),
                                            nn.Linear(embed_size, embed_size))

    def forward(self, x):
        Q, K, V = self.query(x), self.key(x), self.value(x)
        s = torch.bmm(Q, K.transpose(1, 2)) / (self.embed_size ** 0.5)
        return torch.bmm(F.softmax(s, dim=-1), V)


class Nb004MultiHeadSelfAttention(nn.Module):  # seeds/004: MultiHeadSelfAttention(embed_size, num_heads)
    def __init__(self, embed_size, num_heads):
        super().__init__()
        self.embed_size, self.num_heads, self.head_dim = embed_size, num_heads, embed_size // num_heads
        self.query, self.key, self.value = (nn.Linear(embed_size, embed_size), nn.Linear(embed_size, embed_size),
                                            nn.Linear(embed_size, embed_size))
        self.fc_out = nn.Linear(embed_size, embed_size)

    def forward(self, x):
        N, T, _ = x.shape
        Q = self.query(x).view(N, T, self.num_heads, self.head_dim).transpose(1, 2)
        K = self.key(x).view(N, T, self.num_heads, self.head_dim).transpose(1, 2)
        V = self.value(x).view(N, T, self.num_heads, self.head_dim).transpose(1, 2)
        s = torch.matmul(Q, K.transpose(-2, -1)) / (self.head_dim ** 0.5)
        out = torch.matmul(torch.softmax(s, dim=-1), V).transpose(1, 2).contiguous().view(N, T, self.embed_size)
        return self.fc_out(out)


def run_both_dtypes(case, make_model_and_input, forward):
    """make_model_and_input() re-seeds and builds (model, input) exactly as the notebook does, in float32;
    float64 references come from the same model and input converted."""
    for dname, dt in DTYPES.items():
        model, inp = make_model_and_input()
        model = model.to(dt)
        with torch.no_grad():
            case["out_" + dname] = forward(model, inp.to(dt))
    params = dict(make_model_and_input()[0].named_parameters())
    case.update({"param_" + n.replace(".", "_"): p.detach().clone() for n, p in params.items()})


def notebook_cases(w):
    enc = torch.tensor([[1.16, 0.23], [0.57, 1.36], [4.41, -2.16]])
    blocked = torch.tril(torch.ones(3, 3)) == 0  # the notebook's mask: True = masked out

    def nb001_self():
        torch.manual_seed(42)
        return Nb001Attention(d_model=2, row_dim=0, col_dim=1), enc

    case = {"kind": "nb001_self", "seed": 42, "input": enc}
    run_both_dtypes(case, nb001_self, lambda m, x: m(x, x, x))
    w.save("nb001_self", case)
    case = {"kind": "nb001_masked", "seed": 42, "input": enc, "notebook_mask": blocked}
    run_both_dtypes(case, nb001_self, lambda m, x: m(x, x, x, blocked))
    w.save("nb001_masked", case)

    def nb001_mha():
        torch.manual_seed(42)
        return Nb001MultiHeadedAttention(d_model=2, row_dim=0, col_dim=1, num_heads=2), enc

    case = {"kind": "nb001_mha", "seed": 42, "input": enc}
    run_both_dtypes(case, nb001_mha, lambda m, x: m(x, x, x))
    w.save("nb001_mha", case)

    # seeds/003 draws X = randn(128, 64, 512) and then builds the module; it sets no seed, so we use 0.
    def nb003():
        torch.manual_seed(0)
        x = torch.randn(128, 64, 512)
        return Nb003MultiHeadAttention(512, 8), x

    case = {"kind": "nb003", "seed": 0, "batch": 128, "time": 64, "d_model": 512, "n_head": 8}
    run_both_dtypes(case, nb003, lambda m, x: m(x, x, x))
    w.save("nb003", case)
    causal_keep = torch.tril(torch.ones(64, 64))  # 1 = keep, as the notebook's `mask == 0` expects
    case = {"kind": "nb003_masked", "seed": 0, "batch": 128, "time": 64, "d_model": 512, "n_head": 8,
            "notebook_mask": causal_keep}
    run_both_dtypes(case, nb003, lambda m, x: m(x, x, x, causal_keep))
    w.save("nb003_masked", case)

    # seeds/004's usage examples: x = randn(2, 5, 64), then the module; no seed given, we use 0.
    def nb004_single():
        torch.manual_seed(0)
        x = torch.randn(2, 5, 64)
        return Nb004SelfAttention(64), x

    case = {"kind": "nb004_self", "seed": 0, "batch": 2, "time": 5, "embed_size": 64}
    run_both_dtypes(case, nb004_single, lambda m, x: m(x))
    w.save("nb004_self", case)

    def nb004_multi():
        torch.manual_seed(0)
        x = torch.randn(2, 5, 64)
        return Nb004MultiHeadSelfAttention(64, 8), x

    case = {"kind": "nb004_mhsa", "seed": 0, "batch": 2, "time": 5, "embed_size": 64, "num_heads": 8}
    run_both_dtypes(case, nb004_multi, lambda m, x: m(x))
    w.save("nb004_mhsa", case)

    # seeds/000, with the correct maths (the notebook's calc_attn/cross_attn swap W_Q and W_K).
    sentence = "Life is short, eat dessert first"
    vocab = {s: i for i, s in enumerate(sorted(sentence.replace(",", "").split()))}
    ids = torch.tensor([vocab[s] for s in sentence.replace(",", "").split()])
    torch.manual_seed(123)
    embedded = torch.nn.Embedding(6, 16)(ids).detach()
    torch.manual_seed(123)
    wq, wk, wv = torch.randn(24, 16), torch.randn(24, 16), torch.randn(28, 16)
    case = {"kind": "nb000", "seed": 123, "token_ids": ids, "embedded": embedded, "w_q": wq, "w_k": wk, "w_v": wv}
    for dname, dt in DTYPES.items():
        x = embedded.to(dt)
        q, k, v = x @ wq.to(dt).T, x @ wk.to(dt).T, x @ wv.to(dt).T
        scores = q @ k.T
        case["omega_" + dname] = scores
        case["weights_" + dname] = torch.softmax(scores / 24 ** 0.5, dim=1)
        case["out_" + dname] = case["weights_" + dname] @ v
    w.save("nb000", case)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True, help="directory to write CASE.pt files and manifest.txt into")
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    torch.set_num_threads(1)  # reproducible reductions, whatever the machine
    w = Writer(args.out)
    sdpa_cases(w)
    mha_cases(w)
    head_and_cross_cases(w)
    notebook_cases(w)
    w.close()
    print("attn references: %d cases from torch %s in %s" % (len(w.names), torch.__version__, args.out))


if __name__ == "__main__":
    main()
