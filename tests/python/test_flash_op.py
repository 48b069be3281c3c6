"""The attn::flash_attention op, called from Python through the dispatcher, against PyTorch's own attention.

Run by CTest:  /usr/bin/python3 tests/python/test_flash_op.py --library build/libattn.so
Loads the shared library with torch.ops.load_library, then checks outputs and gradients against
torch.nn.functional's scaled-dot-product attention on the same inputs (with an explicit float64 softmax
where F returns NaN, i.e. for rows with no allowed key), windows and offsets at int64's edges (the decode op's
windows and query starts too), and that TorchScript can call the op.
"""
import argparse
import math
import sys

import torch
import torch.nn.functional as F


def torch_attention(q, k, v, allowed, scale):
    """PyTorch's attention in float64: F's SDPA where it is defined; rows with no allowed key give 0."""
    q, k, v = q.double(), k.double(), v.double()
    q = q * (scale * math.sqrt(q.shape[-1]))  # F (1.13) has no scale argument: fold it into q
    empty = None
    if allowed is not None:
        # F gives NaN (and NaN gradients) for a row with no allowed key; attn defines it as 0. Let F see
        # such rows unmasked, then zero them: the output and the gradients are F's everywhere else.
        empty = ~allowed.any(-1, keepdim=True)
        allowed = allowed | empty
    sdpa = getattr(F, "scaled_dot_product_attention", None)
    if sdpa is not None:  # torch >= 2: bool mask, True = may attend
        out = sdpa(q, k, v, attn_mask=allowed)
    else:  # torch 1.13
        out, _ = F._scaled_dot_product_attention(q, k, v, attn_mask=allowed, dropout_p=0.0,
                                                 need_attn_weights=False, is_causal=False)
    if empty is not None:
        out = out.masked_fill(empty, 0.0)
    return out


def allowed_pairs(B, H, Tq, Tk, padding, attend, causal, offset):
    ok = torch.ones(B, H, Tq, Tk, dtype=torch.bool)
    if padding is not None:
        ok &= ~padding.unsqueeze(-2)
    if attend is not None:
        ok &= attend
    if causal:
        ok &= torch.arange(Tk)[None, :] <= torch.arange(Tq)[:, None] + offset
    return ok


def check(name, actual, expected, tol):
    err = (actual.double() - expected).abs().max().item() if actual.numel() else 0.0
    scale = expected.abs().max().item() if expected.numel() else 0.0
    ok = err <= tol * (1.0 + scale)
    print(f"{'ok  ' if ok else 'FAIL'} {name}: max abs err {err:.3e} (tol {tol * (1.0 + scale):.1e})")
    return ok


def refused(name, call, words):
    """Whether call() raises a RuntimeError whose message holds `words`; prints the check."""
    try:
        call()
    except RuntimeError as e:
        ok = words in str(e)
        print(f"{'ok  ' if ok else 'FAIL'} {name}{'' if ok else ': ' + str(e).splitlines()[0]}")
        return ok
    print(f"FAIL {name}: no error")
    return False


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--library", required=True, help="path to libattn.so")
    args = parser.parse_args()
    torch.ops.load_library(args.library)
    op = torch.ops.attn.flash_attention
    torch.manual_seed(0)
    good = True

    cases = [  # B, H, Tq, Tk, d_k, d_v, masks, causal
        (1, 1, 1, 1, 8, 8, False, False),
        (2, 3, 67, 67, 16, 16, False, True),
        (1, 2, 65, 300, 32, 32, True, False),
        (2, 2, 129, 130, 24, 40, True, True),
        (1, 2, 300, 513, 64, 64, True, True),
    ]
    for dtype, tol in ((torch.float32, 1e-5), (torch.float64, 1e-10)):
        for B, H, Tq, Tk, dk, dv, masked, causal in cases:
            q = torch.randn(B, H, Tq, dk, dtype=dtype, requires_grad=True)
            k = torch.randn(B, H, Tk, dk, dtype=dtype, requires_grad=True)
            v = torch.randn(B, H, Tk, dv, dtype=dtype, requires_grad=True)
            padding = torch.rand(B, 1, Tk) < 0.3 if masked else None
            attend = torch.rand(Tq, Tk) < 0.7 if masked else None
            offset = Tk - Tq
            scale = 0.7 / math.sqrt(dk)
            out, lse = op(q, k, v, padding, attend, None, causal, offset, scale)
            allowed = allowed_pairs(B, H, Tq, Tk, padding, attend, causal, offset)
            name = f"{dtype} B={B} H={H} Tq={Tq} Tk={Tk} dk={dk} dv={dv} masks={masked} causal={causal}"
            q64, k64, v64 = (t.detach().double().requires_grad_() for t in (q, k, v))
            expected = torch_attention(q64, k64, v64, allowed, scale)
            good &= check(name + " output", out.detach(), expected.detach(), tol)
            cot = torch.randn(out.shape, dtype=torch.float64)
            (out * cot.to(dtype)).sum().backward()
            (expected * cot).sum().backward()
            for got, want, what in ((q.grad, q64.grad, "dq"), (k.grad, k64.grad, "dk"), (v.grad, v64.grad, "dv")):
                good &= check(f"{name} {what}", got, want, tol * 10)

    # An additive mask with -inf entries, against F with the same float mask.
    q, k, v = (torch.randn(2, 2, 40, 16, dtype=torch.float64) for _ in range(3))
    additive = torch.randn(2, 2, 40, 40, dtype=torch.float64)
    additive[:, :, :, 5] = -math.inf
    out, _ = op(q, k, v, None, None, additive, False, 0, None)
    expected = torch.softmax(q @ k.transpose(-1, -2) / 4.0 + additive, -1) @ v
    good &= check("additive mask", out, expected, 1e-10)

    # Grouped-query attention (K/V with fewer heads), forward and backward: against F's enable_gqa where PyTorch
    # has it (>= 2.5), else against F on K/V repeated with repeat_interleave (the same pairing of heads).
    sdpa = getattr(F, "scaled_dot_product_attention", None)
    has_gqa = sdpa is not None and "enable_gqa" in (sdpa.__doc__ or "")
    for H, H_kv in ((8, 2), (6, 1), (9, 3)):
        q = torch.randn(2, H, 33, 16, dtype=torch.float64, requires_grad=True)
        k = torch.randn(2, H_kv, 47, 16, dtype=torch.float64, requires_grad=True)
        v = torch.randn(2, H_kv, 47, 16, dtype=torch.float64, requires_grad=True)
        out, _ = op(q, k, v, None, None, None, True, 47 - 33, None)
        q64, k64, v64 = (t.detach().clone().requires_grad_() for t in (q, k, v))
        causal_ok = torch.ones(33, 47, dtype=torch.bool).tril(47 - 33)
        if has_gqa:
            expected = sdpa(q64, k64, v64, attn_mask=causal_ok, enable_gqa=True)
            how = "F enable_gqa"
        else:
            group = H // H_kv
            expected = torch_attention(q64, k64.repeat_interleave(group, 1), v64.repeat_interleave(group, 1),
                                       causal_ok.expand(2, H, 33, 47), 1.0 / 4.0)
            how = "F on repeat_interleave"
        name = f"GQA H={H} H_kv={H_kv} against {how}"
        good &= check(name + " output", out.detach(), expected.detach(), 1e-10)
        cot = torch.randn(out.shape, dtype=torch.float64)
        (out * cot).sum().backward()
        (expected * cot).sum().backward()
        for got, want, what in ((q.grad, q64.grad, "dq"), (k.grad, k64.grad, "dk"), (v.grad, v64.grad, "dv")):
            good &= check(f"{name} {what}", got, want, 1e-9)

    # TorchScript compiles a call to the op and runs it with the same result.
    @torch.jit.script
    def scripted(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return torch.ops.attn.flash_attention(q, k, v, None, None, None, True, 0, None)[0]

    eager = op(q, k, v, None, None, None, True, 0, None)[0]
    good &= check("TorchScript call", scripted(q, k, v), eager.double(), 0.0)

    # Band arguments at int64's edges. A window of 2^63 - 1 bounds nothing: the kernels add windows to positions,
    # and this one once overflowed there, which blocked every key (a zero output, silently). An offset of 2^60
    # (the largest taken) puts every key before the diagonal; beyond +-2^60 the op refuses it.
    widest, largest_offset = 2**63 - 1, 2**60
    q, k, v = (torch.randn(2, 3, 21, 8, dtype=torch.float64) for _ in range(3))
    everything = torch_attention(q, k, v, None, 8 ** -0.5)
    causal = torch_attention(q, k, v, allowed_pairs(2, 3, 21, 21, None, None, True, 0), 8 ** -0.5)
    for name, kwargs, expected in (
            ("window_right = 2^63 - 1", dict(window_right=widest), everything),
            ("both windows 2^63 - 1", dict(window_left=widest, window_right=widest), everything),
            ("causal, both windows 2^63 - 1", dict(is_causal=True, window_left=widest, window_right=widest), causal),
            ("causal, causal_offset = 2^60", dict(is_causal=True, causal_offset=largest_offset), everything),
            ("causal_offset = -2^60, window_right = 2^63 - 1",
             dict(causal_offset=-largest_offset, window_right=widest), everything)):
        good &= check(f"{name}: against F", op(q, k, v, **kwargs)[0], expected, 1e-10)
    for offset in (largest_offset + 1, -largest_offset - 1):
        good &= refused(f"causal_offset = {offset} is refused, naming causal_offset",
                        lambda: op(q, k, v, is_causal=True, causal_offset=offset), "causal_offset must lie within")
    # The decode op takes windows too: a query at the end of each row's keys, rows of 21 and 12 keys.
    lengths = torch.tensor([21, 12])
    step = torch.ops.attn.decode_attention(q[:, :, -1:], k, v, lengths - 1, lengths, is_causal=False,
                                           window_left=widest, window_right=widest)
    keys = torch.arange(21)[None, :] < lengths[:, None]  # [B, Tk]
    expected = torch_attention(q[:, :, -1:], k, v, keys[:, None, None, :].expand(2, 3, 1, 21), 8 ** -0.5)
    good &= check("decode_attention, both windows 2^63 - 1: against F", step, expected, 1e-10)
    # A query start of 2^60 (the largest position taken) sees every key causally; 2^63 - 1 once overflowed its
    # position + 1 and lost keys silently, and is refused now, as a negative start is.
    step = torch.ops.attn.decode_attention(q[:, :, -1:], k, v, torch.full((2,), largest_offset), lengths)
    good &= check("decode_attention, query_starts = 2^60: against F", step, expected, 1e-10)
    for start in (widest, -1):
        good &= refused(f"decode_attention, query_starts[0] = {start} is refused, naming it",
                        lambda: torch.ops.attn.decode_attention(q[:, :, -1:], k, v, torch.tensor([start, 0]), lengths),
                        "query_starts[0]")

    # Bad input is a clear error, not a crash.
    good &= refused("rank check names the argument", lambda: op(q[0], k, v), "query must be 4-D")

    print("all passed" if good else "FAILURES")
    return 0 if good else 1


if __name__ == "__main__":
    sys.exit(main())
