"""The Python package attn_torch (python/attn_torch/): its import, its op wrappers, and its transformers attention.

Run by CTest (2.x lane):  .venv-torch/bin/python tests/python/test_attn_torch.py --library build-torch-pip/libattn.so
The package is imported from the checkout (python/ on sys.path) with ATTN_LIBRARY set to the build's library;
nothing is pip-installed. Every reference is PyTorch's or transformers' own code:
- the wrappers against torch.nn.functional.scaled_dot_product_attention (math backend, float64) and F.linear;
- attn_torch.transformers.attention_forward against transformers' sdpa_attention_forward on the same inputs and
  the masks transformers' masking_utils builds (GQA, causal prefill and decode, padding, a StaticCache-shaped key
  buffer, sliding window, scaling, float masks, gradients), against Gemma 2's eager attention for softcap and
  GPT-OSS's for sinks (SDPA has neither), the clear errors for what it refuses, and a token-by-token decode
  under torch.compile(dynamic=True) (one graph for every cache length).
"""
import argparse
import math
import os
import subprocess
import sys
import tempfile

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
PYTHON_DIR = os.path.normpath(os.path.join(HERE, "..", "..", "python"))

failures = []


def check(name, actual, expected, tol, rows=None):
    """max |actual - expected| <= tol · (1 + max |expected|), over the rows selected by `rows` (bool) if given."""
    actual, expected = actual.detach().double(), expected.detach().double()
    if rows is not None:
        actual, expected = actual[rows], expected[rows]
    if actual.shape != expected.shape:
        failures.append(name)
        print(f"FAIL {name}: shape {tuple(actual.shape)} != {tuple(expected.shape)}")
        return
    err = (actual - expected).abs().max().item() if actual.numel() else 0.0
    bound = tol * (1.0 + (expected.abs().max().item() if expected.numel() else 0.0))
    ok = err <= bound and not math.isnan(err)
    if not ok:
        failures.append(name)
    print(f"{'ok  ' if ok else 'FAIL'} {name}: max abs err {err:.2e} (tol {bound:.1e})")


def expect(name, condition, detail=""):
    if not condition:
        failures.append(name)
    print(f"{'ok  ' if condition else 'FAIL'} {name}{': ' + detail if detail else ''}")


def expect_error(name, call, *words):
    """call() must raise ValueError, TypeError (or RuntimeError from the op) whose message contains every one of
    `words`."""
    try:
        call()
    except (ValueError, TypeError, RuntimeError) as error:
        message = str(error)
        missing = [w for w in words if w not in message]
        expect(name, not missing, f"raised {type(error).__name__}: {message[:160]}"
               + (f" (missing {missing})" if missing else ""))
        return
    expect(name, False, "raised nothing")


def sdpa64(q, k, v, mask=None, scale=None, causal=False):
    """PyTorch's SDPA in float64 on the math backend (its definition), K/V heads repeated for GQA."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    with sdpa_kernel(SDPBackend.MATH):
        return F.scaled_dot_product_attention(q.double(), k.double(), v.double(), attn_mask=mask,
                                              is_causal=causal, scale=scale)


# ------------------------------------------------------------------------------------------------------------
def test_import(library, cxx):
    import attn_torch
    expect("import: the library loaded is ATTN_LIBRARY's",
           os.path.realpath(attn_torch.library_path()) == os.path.realpath(library),
           f"{attn_torch.library_path()}")
    expect("import: torch.ops.attn has the three ops",
           all(hasattr(torch.ops.attn, n) for n in ("flash_attention", "decode_attention", "linear_rows")))
    for fn in (attn_torch.flash_attention, attn_torch.decode_attention, attn_torch.linear_rows):
        expect(f"import: {fn.__name__} has a docstring with its shapes", "[" in (fn.__doc__ or ""))
    # A wrong ATTN_LIBRARY is a clear ImportError naming the variable, in a fresh process.
    env = dict(os.environ, ATTN_LIBRARY="/nonexistent/libattn.so", PYTHONPATH=PYTHON_DIR)
    run = subprocess.run([sys.executable, "-c", "import attn_torch"], env=env, capture_output=True, text=True)
    expect("import: a missing ATTN_LIBRARY is an ImportError that names it",
           run.returncode != 0 and "ImportError" in run.stderr and "ATTN_LIBRARY=/nonexistent" in run.stderr,
           run.stderr.strip().splitlines()[-1][:160] if run.stderr.strip() else "no error")
    # Without ATTN_LIBRARY and without a library in the package (a checkout's python/ has none), the ImportError
    # names where it looked.
    env = {k: v for k, v in os.environ.items() if k != "ATTN_LIBRARY"}
    env["PYTHONPATH"] = PYTHON_DIR
    run = subprocess.run([sys.executable, "-c", "import attn_torch"], env=env, capture_output=True, text=True)
    expect("import: no library anywhere is an ImportError that names the paths it looked at",
           run.returncode != 0 and "ATTN_LIBRARY is not set" in run.stderr
           and os.path.join("attn_torch", "lib", "libattn.so") in run.stderr,
           run.stderr.strip().splitlines()[-1][:200] if run.stderr.strip() else "no error")
    # Under torch 1.x (here a stand-in module that has only its version) the import stops at once with a clear
    # ImportError, before any library is looked for or loaded.
    with tempfile.TemporaryDirectory() as tmp:
        os.makedirs(os.path.join(tmp, "torch"))
        with open(os.path.join(tmp, "torch", "__init__.py"), "w") as f:
            f.write("__version__ = '1.13.1'\n")
        env = dict(os.environ, PYTHONPATH=tmp + os.pathsep + PYTHON_DIR)
        run = subprocess.run([sys.executable, "-c", "import attn_torch"], env=env, capture_output=True, text=True)
        expect("import: torch 1.x is an ImportError saying the package needs PyTorch 2.x",
               run.returncode == 1 and "ImportError: attn_torch needs PyTorch 2.x; this is torch 1.13.1" in run.stderr,
               run.stderr.strip().splitlines()[-1][:200] if run.stderr.strip() else "no error")
    # A library linked against another torch's libc10 (here a stub named libc10.so.0.0) is refused before it is
    # loaded: loading one beside this torch puts two torches in the process, which aborts or crashes it.
    with tempfile.TemporaryDirectory() as tmp:
        c10 = os.path.join(tmp, "libc10.so.0.0")
        other = os.path.join(tmp, "libattn.so")
        subprocess.run([cxx, "-shared", "-fPIC", "-x", "c++", os.devnull, "-Wl,-soname,libc10.so.0.0", "-o", c10],
                       check=True)
        subprocess.run([cxx, "-shared", "-fPIC", "-x", "c++", os.devnull, "-o", other, "-Wl,--no-as-needed",
                        "-x", "none", c10], check=True)
        env = dict(os.environ, ATTN_LIBRARY=other, PYTHONPATH=PYTHON_DIR, LD_LIBRARY_PATH=tmp)
        run = subprocess.run([sys.executable, "-c", "import attn_torch"], env=env, capture_output=True, text=True)
        expect("import: a library built against another torch is an ImportError that names both libc10s",
               run.returncode == 1 and "ImportError" in run.stderr and "built against another torch" in run.stderr
               and "libc10.so.0.0" in run.stderr,
               f"rc {run.returncode}: " + (run.stderr.strip().splitlines()[-1][:200] if run.stderr.strip() else ""))


def test_wrappers():
    import attn_torch
    torch.manual_seed(0)
    for dtype, tol in ((torch.float32, 2e-5), (torch.float64, 1e-11)):
        B, H, H_kv, Tq, Tk, d = 2, 6, 2, 37, 70, 32
        q = torch.randn(B, H, Tq, d, dtype=dtype, requires_grad=True)
        k = torch.randn(B, H_kv, Tk, d, dtype=dtype, requires_grad=True)
        v = torch.randn(B, H_kv, Tk, d, dtype=dtype, requires_grad=True)
        padding = torch.rand(B, 1, Tk) < 0.2
        scale = 0.3
        out, lse = attn_torch.flash_attention(q, k, v, key_padding_mask=padding, is_causal=True,
                                              causal_offset=Tk - Tq, scale=scale)
        allowed = torch.ones(Tq, Tk, dtype=torch.bool).tril(Tk - Tq) & ~padding[:, :, None, :]
        q64, k64, v64 = (t.detach().double().requires_grad_() for t in (q, k, v))
        ref = sdpa64(q64, k64, v64, mask=allowed, scale=scale)
        check(f"flash_attention {dtype} GQA 6/2, padding, causal bottom-right, scale", out, ref, tol)
        scores = (q64.detach() @ k64.detach().repeat_interleave(3, 1).transpose(-1, -2)) * scale
        check(f"flash_attention {dtype} logsumexp", lse,
              torch.logsumexp(scores.masked_fill(~allowed, -math.inf), -1), tol)
        cot = torch.randn(out.shape, dtype=torch.float64)
        (out * cot.to(dtype)).sum().backward()
        (ref * cot).sum().backward()
        for got, want, what in ((q.grad, q64.grad, "dq"), (k.grad, k64.grad, "dk"), (v.grad, v64.grad, "dv")):
            check(f"flash_attention {dtype} {what}", got, want, tol * 10)

    # Window (left 5, right 2, around the top-left diagonal), additive mask, attend_mask, float64.
    q, k, v = (torch.randn(1, 2, 20, 16, dtype=torch.float64) for _ in range(3))
    i, j = torch.arange(20)[:, None], torch.arange(20)[None, :]
    additive = torch.randn(1, 2, 20, 20, dtype=torch.float64)
    attend = torch.rand(20, 20) < 0.8
    out, _ = attn_torch.flash_attention(q, k, v, attend_mask=attend, additive_mask=additive, window_left=5,
                                        window_right=2)
    band = (j >= i - 5) & (j <= i + 2) & attend
    ref = sdpa64(q, k, v, mask=additive.masked_fill(~band, -math.inf))
    rows = band.any(-1).expand(1, 2, 20)
    check("flash_attention float64 window, attend_mask, additive_mask", out, ref, 1e-11, rows=rows)
    check("flash_attention float64 rows with no key are 0", out[~rows], torch.zeros_like(out[~rows]), 0)

    # bfloat16 at SmolLM2's heads (9 query heads on 3 kv heads of 64, a causal prefill): attn's output no further
    # from float64 than LibTorch's bfloat16 SDPA's, over three draws. Where bfloat16 is widened to float, attn's
    # output is the float64 result rounded once; the bound leaves room for routes that round P, as SDPA does.
    err_attn = err_sdpa = 0.0
    for _ in range(3):
        q = (2 * torch.randn(1, 9, 41, 64)).bfloat16()
        k, v = (2 * torch.randn(1, 3, 41, 64)).bfloat16(), torch.randn(1, 3, 41, 64).bfloat16()
        ref = sdpa64(q, k, v, causal=True)
        out, _ = attn_torch.flash_attention(q, k, v, is_causal=True)
        peer = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        err_attn += (out.double() - ref).abs().mean().item()
        err_sdpa += (peer.double() - ref).abs().mean().item()
    expect("flash_attention bfloat16 GQA causal: mean error from float64 within 1.25x of SDPA's bfloat16",
           err_attn <= 1.25 * err_sdpa, f"{err_attn / 3:.2e} against SDPA's {err_sdpa / 3:.2e}")

    # decode_attention: 2 queries per row at the end of each row's cache, against SDPA on the valid keys.
    B, H, H_kv, cap, d = 3, 4, 2, 50, 32
    lengths = torch.tensor([50, 17, 33])
    q = torch.randn(B, H, 2, d)
    kc, vc = torch.randn(B, H_kv, cap, d), torch.randn(B, H_kv, cap, d)
    out = attn_torch.decode_attention(q, kc, vc, lengths - 2, lengths, is_causal=True)
    for b in range(B):
        n = int(lengths[b])
        ref = sdpa64(q[b:b + 1], kc[b:b + 1, :, :n], vc[b:b + 1, :, :n],
                     mask=torch.ones(2, n, dtype=torch.bool).tril(n - 2))
        check(f"decode_attention float32 row {b} (cache length {n})", out[b:b + 1], ref, 2e-5)

    x, w, bias = torch.randn(3, 5, 96), torch.randn(40, 96), torch.randn(40)
    check("linear_rows float32 15 rows", attn_torch.linear_rows(x, w, bias), F.linear(x.double(), w.double(),
                                                                                        bias.double()), 1e-5)
    # A required tensor that is None: the wrappers name the function and the argument, where the dispatcher's
    # message ("tensor does not have a device") names neither.
    t = torch.randn(1, 2, 3, 4)
    expect_error("flash_attention names a None key", lambda: attn_torch.flash_attention(t, None, t),
                 "attn_torch.flash_attention", "key must be a Tensor, got NoneType")
    expect_error("decode_attention names a None key_lengths",
                 lambda: attn_torch.decode_attention(t, t, t, torch.zeros(1, dtype=torch.long), None),
                 "attn_torch.decode_attention", "key_lengths must be a Tensor")
    expect_error("linear_rows names a None weight", lambda: attn_torch.linear_rows(torch.randn(2, 4), None),
                 "attn_torch.linear_rows", "weight must be a Tensor")
    expect_error("linear_rows refuses 17 rows (the op's own error)",
                 lambda: attn_torch.linear_rows(torch.randn(17, 8), torch.randn(4, 8)), "16")
    # linear_rows_many, straight through the dispatcher: one result per weight, a bias on the second only.
    w2, b2 = torch.randn(7, 96), torch.randn(7)
    outs = torch.ops.attn.linear_rows_many(x, [w, w2], [None, b2])
    check("linear_rows_many float32 weights[0]", outs[0], F.linear(x.double(), w.double()), 1e-5)
    check("linear_rows_many float32 weights[1] with its bias", outs[1], F.linear(x.double(), w2.double(), b2.double()),
          1e-5)
    expect_error("linear_rows_many names the weight that does not fit",
                 lambda: torch.ops.attn.linear_rows_many(x, [w, torch.randn(7, 95)], []), "weights[1]", "95")


# ------------------------------------------------------------------------------------------------------------
class Layer(torch.nn.Module):
    """What transformers' attention functions read from the attention layer."""

    def __init__(self, heads, kv_heads, head_dim, causal=True):
        super().__init__()
        self.is_causal = causal
        self.num_key_value_groups = heads // kv_heads
        self.head_dim = head_dim
        self.sinks = torch.nn.Parameter(torch.randn(heads))


def test_transformers_interface():
    import attn_torch.transformers as at
    from transformers.integrations.sdpa_attention import sdpa_attention_forward
    from transformers.masking_utils import (causal_mask_function, eager_mask, sdpa_mask,
                                            sliding_window_causal_mask_function)
    from transformers.models.gemma2.modeling_gemma2 import eager_attention_forward as gemma2_eager
    from transformers.models.gpt_oss.modeling_gpt_oss import eager_attention_forward as gpt_oss_eager

    torch.manual_seed(1)
    B, H, H_kv, d = 2, 8, 2, 32
    layer = Layer(H, H_kv, d).eval()

    def qkv(Tq, Tk, dtype=torch.float32):
        return (torch.randn(B, H, Tq, d, dtype=dtype), torch.randn(B, H_kv, Tk, d, dtype=dtype),
                torch.randn(B, H_kv, Tk, d, dtype=dtype))

    def both(name, q, k, v, mask_kwargs=None, tol=2e-5, rows=None, **kwargs):
        """transformers' sdpa_attention_forward with sdpa_mask's mask vs ours with attn's mask function."""
        sdpa_m = sdpa_mask(**mask_kwargs) if mask_kwargs else None
        ours_m = at.attention_mask(**mask_kwargs) if mask_kwargs else None
        ref, ref_w = sdpa_attention_forward(layer, q, k, v, sdpa_m, **kwargs)
        out, w = at.attention_forward(layer, q, k, v, ours_m, **kwargs)
        expect(f"{name}: output layout [B, Tq, H, d] contiguous, weights None",
               out.shape == ref.shape == (q.shape[0], q.shape[2], q.shape[1], v.shape[-1])
               and out.is_contiguous() and w is None)
        check(name, out, ref, tol, rows=rows)
        return sdpa_m, ours_m

    # GQA, causal prefill: both masks are None (pure causal), so the kernel gets no mask at all.
    q, k, v = qkv(40, 40)
    s_m, o_m = both("GQA 8/2, causal prefill Tq = Tk = 40", q, k, v,
                    dict(batch_size=B, q_length=40, kv_length=40), scaling=d ** -0.5)
    expect("pure causal prefill: attn's mask function returns None", o_m is None and s_m is None)
    # Decoding one token after 63 cached keys.
    q, k, v = qkv(1, 64)
    s_m, o_m = both("GQA decode Tq = 1, Tk = 64", q, k, v,
                    dict(batch_size=B, q_length=1, kv_length=64, q_offset=63), scaling=d ** -0.5)
    expect("decode without padding: attn's mask function returns None", o_m is None)
    # A chunk of 6 queries after 20 cached keys (DynamicCache): causal bottom-right, given as a mask.
    q, k, v = qkv(6, 26)
    both("chunked prefill Tq = 6 after 20 cached keys (mask)", q, k, v,
         dict(batch_size=B, q_length=6, kv_length=26, q_offset=20))
    # No mask, causal, Tq < Tk: attn aligns bottom-right; sdpa_attention_forward only sees this case for an empty
    # StaticCache (top-left), so the reference is SDPA given the bottom-right mask explicitly.
    bottom_right = torch.ones(6, 26, dtype=torch.bool).tril(20)[None, None]
    ref, _ = sdpa_attention_forward(layer, q, k, v, bottom_right)
    out, _ = at.attention_forward(layer, q, k, v, None)
    check("no mask, causal, Tq = 6 < Tk = 26: bottom-right", out, ref, 2e-5)
    # An empty StaticCache of 32 slots, prefill of 10: sdpa_mask returns None (SDPA's top-left is_causal);
    # attn's mask function builds the mask instead, and the outputs agree.
    q, k, v = qkv(10, 32)
    s_m, o_m = both("StaticCache-shaped prefill Tq = 10 into 32 slots", q, k, v,
                    dict(batch_size=B, q_length=10, kv_length=32, q_offset=0))
    expect("StaticCache-shaped prefill: sdpa_mask skips, attn's mask function builds a mask",
           s_m is None and o_m is not None and o_m.dtype == torch.bool)
    # Left padding in a batch of 2 (row 1 has 5 pad tokens), prefill.
    pad = torch.ones(B, 24, dtype=torch.bool)
    pad[1, :5] = False
    q, k, v = qkv(24, 24)
    mk = dict(batch_size=B, q_length=24, kv_length=24, attention_mask=pad)
    ours_m = at.attention_mask(**mk)
    rows = ours_m.any(-1).expand(B, H, 24).transpose(1, 2)  # [B, Tq, H]: queries with at least one key
    both("left padding, causal prefill (bool mask)", q, k, v, mk, rows=rows)
    out, _ = at.attention_forward(layer, q, k, v, ours_m)
    check("left padding: pad queries (no key) give zeros", out[~rows], torch.zeros_like(out[~rows]), 0)
    # The same padding as an additive float mask (eager_mask's format: 0 or the dtype's minimum).
    float_mask = eager_mask(**mk, dtype=torch.float32)
    ref, _ = sdpa_attention_forward(layer, q, k, v, float_mask)
    out, _ = at.attention_forward(layer, q, k, v, float_mask)
    check("left padding, additive float mask", out, ref, 2e-5, rows=rows)
    # Sliding window of 8: the mask transformers builds, and the mask-less path with sliding_window=8.
    q, k, v = qkv(30, 30)
    mk = dict(batch_size=B, q_length=30, kv_length=30, mask_function=sliding_window_causal_mask_function(8),
              local_size=8)
    window_mask, _ = both("sliding window 8 (mask)", q, k, v, mk, sliding_window=8)
    ref, _ = sdpa_attention_forward(layer, q, k, v, window_mask)
    out, _ = at.attention_forward(layer, q, k, v, None, sliding_window=8)
    check("sliding_window=8 without a mask (window_left 7)", out, ref, 2e-5)
    q1, k1, v1 = qkv(3, 30)
    ref, _ = sdpa_attention_forward(layer, q1, k1, v1, sdpa_mask(batch_size=B, q_length=3, kv_length=30,
                                                                 q_offset=27, mask_function=sliding_window_causal_mask_function(8), local_size=8))
    out, _ = at.attention_forward(layer, q1, k1, v1, None, sliding_window=8)
    check("sliding_window=8 without a mask, 3 queries after 27 keys", out, ref, 2e-5)
    # scaling, and is_causal=False (an encoder), float64.
    q, k, v = qkv(12, 19, torch.float64)
    both("scaling 0.05, float64", q, k, v, dict(batch_size=B, q_length=12, kv_length=19, q_offset=7),
         scaling=0.05, tol=1e-11)
    enc = Layer(H, H_kv, d, causal=False).eval()
    ref, _ = sdpa_attention_forward(enc, q, k, v, None, scaling=0.2)
    out, _ = at.attention_forward(enc, q, k, v, None, scaling=0.2)
    check("module.is_causal = False, no mask, float64", out, ref, 1e-11)
    out, _ = at.attention_forward(layer, q, k, v, None, scaling=0.2, is_causal=False)
    check("is_causal=False overrides module.is_causal", out, ref, 1e-11)
    # bfloat16, causal prefill.
    q, k, v = qkv(33, 33, torch.bfloat16)
    both("bfloat16 causal prefill", q, k, v, dict(batch_size=B, q_length=33, kv_length=33), tol=2e-2)

    # Soft-capping (Gemma 2): SDPA refuses it; the reference is Gemma 2's eager attention with eager_mask's mask.
    q, k, v = qkv(21, 21, torch.float64)
    expect_error("sdpa_attention_forward refuses softcap (why the reference is Gemma 2's eager)",
                 lambda: sdpa_attention_forward(layer, q, k, v, None, softcap=5.0), "softcap")
    mk = dict(batch_size=B, q_length=21, kv_length=21)
    ref, _ = gemma2_eager(layer, q * 3, k, v, eager_mask(**mk, dtype=torch.float64), scaling=0.125, softcap=5.0)
    out, _ = at.attention_forward(layer, q * 3, k, v, at.attention_mask(**mk), scaling=0.125, softcap=5.0)
    # attn's tanh is a rational approximation, within 4e-7 relative error (docs/variants.md), in float64 too.
    check("softcap 5.0 against Gemma 2's eager attention, float64", out, ref, 2e-6)
    out, _ = at.attention_forward(layer, q * 3, k, v, None, scaling=0.125, softcap=5.0)
    check("softcap 5.0, no mask (causal), against Gemma 2's eager", out, ref, 2e-6)
    # Sinks (GPT-OSS's s_aux): the reference is GPT-OSS's eager attention, which reads module.sinks.
    ref, _ = gpt_oss_eager(layer, q, k, v, eager_mask(**mk, dtype=torch.float64), scaling=0.125)
    out, _ = at.attention_forward(layer, q, k, v, None, scaling=0.125, s_aux=layer.sinks.detach().double())
    check("sinks (s_aux) against GPT-OSS's eager attention, float64", out, ref, 1e-10)
    mk_w = dict(mk, mask_function=sliding_window_causal_mask_function(6), local_size=6)
    ref, _ = gpt_oss_eager(layer, q, k, v, eager_mask(**mk_w, dtype=torch.float64), scaling=0.125)
    out, _ = at.attention_forward(layer, q, k, v, at.attention_mask(**mk_w), scaling=0.125, sliding_window=6,
                                  s_aux=layer.sinks.detach().double())
    check("sinks and sliding window 6 against GPT-OSS's eager attention", out, ref, 1e-10)

    # Gradients in training mode (dropout 0), against sdpa_attention_forward's.
    train = Layer(H, H_kv, d).train()
    q, k, v = (t.requires_grad_() for t in qkv(17, 17, torch.float64))
    q2, k2, v2 = (t.detach().clone().requires_grad_() for t in (q, k, v))
    out, _ = at.attention_forward(train, q, k, v, None, dropout=0.0, scaling=0.2)
    ref, _ = sdpa_attention_forward(train, q2, k2, v2, None, dropout=0.0, scaling=0.2)
    cot = torch.randn(out.shape, dtype=torch.float64)
    (out * cot).sum().backward()
    (ref * cot).sum().backward()
    for got, want, what in ((q.grad, q2.grad, "dq"), (k.grad, k2.grad, "dk"), (v.grad, v2.grad, "dv")):
        check(f"training, causal GQA: {what} against sdpa_attention_forward's", got, want, 1e-10)

    # What it refuses, each with an error that names the argument.
    q, k, v = qkv(5, 5)
    expect_error("dropout > 0 in training is refused, naming dropout",
                 lambda: at.attention_forward(train, q, k, v, None, dropout=0.1), "dropout=0.1", "training",
                 "attention_probs_dropout_prob")
    out, _ = at.attention_forward(layer, q, k, v, None, dropout=0.1)
    ref, _ = at.attention_forward(layer, q, k, v, None)
    check("dropout in eval mode is ignored", out, ref, 0)
    expect_error("position_bias is refused", lambda: at.attention_forward(
        layer, q, k, v, None, position_bias=torch.zeros(1, H, 5, 5)), "position_bias")
    expect_error("output_attentions=True is refused", lambda: at.attention_forward(
        layer, q, k, v, None, output_attentions=True), "output_attentions")
    expect_error("cu_seq_lens_q is refused", lambda: at.attention_forward(
        layer, q, k, v, None, cu_seq_lens_q=torch.tensor([0, 5])), "cu_seq_lens_q")
    expect_error("a paged cache is refused", lambda: at.attention_forward(layer, q, k, v, None, cache=object()),
                 "cache")
    expect_error("an integer mask is refused", lambda: at.attention_forward(
        layer, q, k, v, torch.ones(B, 1, 5, 5, dtype=torch.int64)), "attention_mask", "int64")
    expect_error("a 2-D mask is refused", lambda: at.attention_forward(
        layer, q, k, v, torch.ones(5, 5, dtype=torch.bool)), "attention_mask", "4-D")
    expect_error("a bidirectional window without a mask is refused", lambda: at.attention_forward(
        enc, *qkv(9, 9), None, sliding_window=4), "sliding_window=4")
    expect_error("H_kv not dividing H: the op's own error", lambda: at.attention_forward(
        layer, q, torch.randn(B, 3, 5, d), torch.randn(B, 3, 5, d), None), "dividing")
    # float16 on the CPU: the op computes it in float32 (as bfloat16 widened); the reference is transformers' SDPA
    # in float64 on the same rounded inputs.
    qh, kh, vh = q.half(), k.half(), v.half()
    ref, _ = sdpa_attention_forward(layer, qh.double(), kh.double(), vh.double(), None, scaling=d ** -0.5)
    out, _ = at.attention_forward(layer, qh, kh, vh, None, scaling=d ** -0.5)
    expect("float16 on the CPU: the output is float16", out.dtype == torch.float16, str(out.dtype))
    check("float16 on the CPU, GQA causal, against SDPA in float64", out, ref, 2e-3)


def test_compiled_decode():
    """Decoding token by token through attention_forward under torch.compile(dynamic=True): causal_offset =
    Tk - Tq is a SymInt of the op's schema, so every cache length runs the one graph (an int there compiled one
    per step), and each step matches transformers' sdpa_attention_forward."""
    import attn_torch.transformers as at
    from torch._dynamo.utils import counters
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    torch.manual_seed(5)
    H, H_kv, d = 4, 2, 16
    layer = Layer(H, H_kv, d).eval()

    def step(q, k, v):
        return at.attention_forward(layer, q, k, v, None, scaling=d ** -0.5)[0]

    torch._dynamo.reset()
    counters.clear()
    compiled = torch.compile(step, dynamic=True, fullgraph=True)
    with torch.no_grad():
        for tk in (20, 33, 47, 61):
            q, k, v = torch.randn(1, H, 1, d), torch.randn(1, H_kv, tk, d), torch.randn(1, H_kv, tk, d)
            ref, _ = sdpa_attention_forward(layer, q, k, v, None, scaling=d ** -0.5)
            check(f"compiled decode Tq = 1, Tk = {tk}, against sdpa_attention_forward", compiled(q, k, v), ref, 2e-5)
    graphs = counters["stats"]["unique_graphs"]
    expect("compiled decode: one graph for 4 cache lengths", graphs == 1,
           f"{graphs} graph(s), recompiles {dict(counters['recompiles'])}")


def test_register():
    import attn_torch.transformers as at
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface
    name = at.register("attn_test")
    expect("register: AttentionInterface has the function",
           AttentionInterface()[name] is at.attention_forward)
    expect("register: AttentionMaskInterface has the mask function",
           AttentionMaskInterface()[name] is at.attention_mask)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--library", required=True, help="path to libattn.so (set as ATTN_LIBRARY)")
    parser.add_argument("--cxx", default="c++", help="a C++ compiler, to build a stub library (default: c++)")
    args = parser.parse_args()
    os.environ["ATTN_LIBRARY"] = args.library
    sys.path.insert(0, PYTHON_DIR)
    torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))
    test_import(args.library, args.cxx)
    test_wrappers()
    test_transformers_interface()
    test_compiled_decode()
    test_register()
    if failures:
        print(f"{len(failures)} check(s) failed: {failures}")
        return 1
    print("all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
