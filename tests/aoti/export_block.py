"""Exports an attention block that calls attn::flash_attention and compiles it with AOTInductor (PyTorch >= 2).

Run by CTest in the LibTorch 2.x lane, before tests/aoti/run_package.cpp loads the package in C++:
    .venv-torch/bin/python tests/aoti/export_block.py --library build-torch-pip/libattn.so --out DIR

Writes into DIR:
  attention_block.pt2  the package: torch.export with the sequence length as a Dim, compiled for the CPU by
                       torch._inductor.aoti_compile_and_package. The op is not compiled into it: the package
                       calls attn::flash_attention through the dispatcher, so its C++ host must load libattn.so.
  cases.pt             torch.save of {"lengths": [T...], "inputs": [x...], "outputs": [y...], "min_length": m,
                       "max_length": M}: the eager block's outputs at three lengths other than the traced one,
                       and the Dim's range, for torch::pickle_load in C++.
"""
import argparse
import math
import os
import sys
import time

import torch

EMBED, HEADS, KV_HEADS, BATCH = 64, 4, 2, 2
TRACED_LENGTH = 37
MIN_LENGTH, MAX_LENGTH = 2, 4096  # the Dim's range, which the package enforces
# Other than the traced length, so that the C++ side proves the package is not specialised to it; 301 spans
# several of the kernel's key tiles.
CHECKED_LENGTHS = (5, 128, 301)


class AttentionBlock(torch.nn.Module):
    """Causal grouped-query self-attention: projections, attn::flash_attention, output projection."""

    def __init__(self):
        super().__init__()
        self.head_dim = EMBED // HEADS
        self.q_proj = torch.nn.Linear(EMBED, HEADS * self.head_dim)
        self.k_proj = torch.nn.Linear(EMBED, KV_HEADS * self.head_dim)
        self.v_proj = torch.nn.Linear(EMBED, KV_HEADS * self.head_dim)
        self.out_proj = torch.nn.Linear(HEADS * self.head_dim, EMBED)
        self.scale = 1.0 / math.sqrt(self.head_dim)

    def forward(self, x):
        B, T, _ = x.shape
        q = self.q_proj(x).view(B, T, HEADS, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(B, T, KV_HEADS, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(B, T, KV_HEADS, self.head_dim).transpose(1, 2)
        # K/V have fewer heads than Q: the op pairs each query head with its group's K/V head itself.
        out, _ = torch.ops.attn.flash_attention(q, k, v, None, None, None, True, 0, self.scale)
        return self.out_proj(out.transpose(1, 2).reshape(B, T, HEADS * self.head_dim))


def plain_pytorch(block, x):
    """The same block in float64 with PyTorch's own attention, to catch a wrong eager op before it becomes the
    reference the C++ side compares with."""
    x = x.double()
    B, T, _ = x.shape
    d, group = block.head_dim, HEADS // KV_HEADS
    w = {n: p.detach().double() for n, p in block.named_parameters()}
    q = (x @ w["q_proj.weight"].T + w["q_proj.bias"]).view(B, T, HEADS, d).transpose(1, 2)
    k = (x @ w["k_proj.weight"].T + w["k_proj.bias"]).view(B, T, KV_HEADS, d).transpose(1, 2)
    v = (x @ w["v_proj.weight"].T + w["v_proj.bias"]).view(B, T, KV_HEADS, d).transpose(1, 2)
    k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    scores = (q @ k.transpose(-1, -2)) * block.scale
    scores = scores.masked_fill(~torch.ones(T, T, dtype=torch.bool).tril(), -math.inf)
    out = torch.softmax(scores, -1) @ v
    return out.transpose(1, 2).reshape(B, T, EMBED) @ w["out_proj.weight"].T + w["out_proj.bias"]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--library", required=True, help="path to libattn.so (registers torch.ops.attn)")
    parser.add_argument("--out", required=True, help="directory for attention_block.pt2 and cases.pt")
    args = parser.parse_args()
    torch.ops.load_library(args.library)
    os.makedirs(args.out, exist_ok=True)
    print(f"torch {torch.__version__}")

    torch.manual_seed(0)
    block = AttentionBlock().eval()
    example = torch.randn(BATCH, TRACED_LENGTH, EMBED)

    started = time.monotonic()
    T = torch.export.Dim("T", min=MIN_LENGTH, max=MAX_LENGTH)
    with torch.no_grad():
        program = torch.export.export(block, (example,), dynamic_shapes=({1: T},))
    ops = {str(n.target) for n in program.graph.nodes if n.op == "call_function"}
    if "attn.flash_attention.default" not in ops:
        print(f"FAIL: the exported graph does not call attn.flash_attention: {sorted(ops)}")
        return 1
    print(f"torch.export with Dim T: {time.monotonic() - started:.1f} s")

    started = time.monotonic()
    package = os.path.join(args.out, "attention_block.pt2")
    with torch.no_grad():
        torch._inductor.aoti_compile_and_package(program, package_path=package)
    print(f"aoti_compile_and_package -> {package}: {time.monotonic() - started:.1f} s")

    lengths, inputs, outputs = [], [], []
    good = True
    for L in CHECKED_LENGTHS:
        x = torch.randn(BATCH, L, EMBED, generator=torch.Generator().manual_seed(L))
        with torch.no_grad():
            y = block(x)
        err = (y.double() - plain_pytorch(block, x)).abs().max().item()
        ok = err <= 1e-5
        good &= ok
        print(f"{'ok  ' if ok else 'FAIL'} eager block at T={L} against float64 PyTorch attention: "
              f"max abs err {err:.3e} (tol 1e-5)")
        lengths.append(L)
        inputs.append(x.contiguous().clone())
        outputs.append(y.contiguous().clone())
    cases = os.path.join(args.out, "cases.pt")
    torch.save({"lengths": lengths, "inputs": inputs, "outputs": outputs, "min_length": MIN_LENGTH,
                "max_length": MAX_LENGTH}, cases)
    print(f"wrote {cases}")
    return 0 if good else 1


if __name__ == "__main__":
    sys.exit(main())
