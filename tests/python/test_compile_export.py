"""torch.compile and torch.export see through attn's ops (PyTorch >= 2 only).

Run by CTest in the LibTorch 2.x lane:
    .venv-torch/bin/python tests/python/test_compile_export.py --library build-torch-pip/libattn.so

Both need the op's Meta kernels (src/ops/meta/): Dynamo and AOTAutograd trace the forward and the backward op on
fake tensors, and torch.export records the op in its graph. The Meta kernels read symbolic sizes, so
torch.compile(dynamic=True) compiles one graph for every sequence length and torch.export takes a Dim there:
flash_attention (padded and packed, and its causal_offset), decode_attention (the cache's capacity) and linear_rows
(the rows). Every compiled or exported result, forward and gradients, is checked against the same op run eagerly on
the same inputs, and the eager op against a float64 reference, so a wrong Meta kernel (wrong shape, dtype or
stride), a size it specialises (a second graph) or a wrong trace fails here.
"""
import argparse
import itertools
import math
import os
import sys
import tempfile

import torch
import torch._inductor
from torch._dynamo.utils import counters


def check(name, ok, detail=""):
    print(f"{'ok  ' if ok else 'FAIL'} {name}{': ' + detail if detail else ''}")
    return ok


def close(name, actual, expected, tol):
    err = (actual.double() - expected.double()).abs().max().item()
    return check(name, actual.shape == expected.shape and err <= tol,
                 f"shape {tuple(actual.shape)}, max abs err {err:.3e} (tol {tol:.1e})")


def attention(q, k, v, padding, scale):
    """The op as a model would call it: causal self-attention with a key padding mask."""
    out, _ = torch.ops.attn.flash_attention(q, k, v, padding, None, None, True, 0, scale)
    return out


class Attention(torch.nn.Module):
    def __init__(self, scale):
        super().__init__()
        self.scale = scale

    def forward(self, q, k, v, padding):
        return attention(q, k, v, padding, self.scale)


def float64_reference(q, k, v, padding, scale, offset=0):
    """softmax(q k^T * scale) v over the allowed pairs, in float64: key j for query i where j <= i + offset and
    padding (if given) does not mask j. A row with no allowed key is 0."""
    q, k, v = q.double(), k.double(), v.double()
    allowed = torch.arange(k.shape[-2]).unsqueeze(0) <= torch.arange(q.shape[-2]).unsqueeze(1) + offset
    if padding is not None:
        allowed = allowed & ~padding.unsqueeze(-2)
    scores = (q @ k.transpose(-1, -2) * scale).masked_fill(~allowed, -math.inf)
    weights = torch.softmax(scores, -1).nan_to_num(0.0)
    return weights @ v


def inputs(B, H, T, d, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(B, H, T, d, generator=g, dtype=dtype) for _ in range(3))
    padding = torch.zeros(B, 1, T, dtype=torch.bool)
    padding[0, 0, T - 3:] = True  # the last keys of the first batch are padding
    return q, k, v, padding


def forward_and_grads(fn, cotangent, q, k, v, *extra):
    """fn(q, k, v, *extra) and the gradients of sum(fn(...) * cotangent) with respect to q, k and v."""
    q, k, v = (t.detach().clone().requires_grad_() for t in (q, k, v))
    out = fn(q, k, v, *extra)
    (out * cotangent).sum().backward()
    return out.detach(), q.grad, k.grad, v.grad


def compare(name, got, want, tol):
    ok = True
    for what, a, b in zip(("output", "dq", "dk", "dv"), got, want):
        ok &= close(f"{name} {what}", a, b, tol)
    return ok


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--library", required=True, help="path to libattn.so")
    args = parser.parse_args()
    torch.ops.load_library(args.library)
    print(f"torch {torch.__version__}")
    good = True
    scale = 0.6 / math.sqrt(32)
    module = Attention(scale)

    for dtype, tol in ((torch.float32, 2e-5), (torch.float64, 1e-12)):
        q, k, v, padding = inputs(2, 3, 70, 32, dtype, seed=1)
        cot = torch.randn(2, 3, 70, 32, generator=torch.Generator().manual_seed(2), dtype=dtype)
        eager = forward_and_grads(module, cot, q, k, v, padding)
        good &= close(f"{dtype} eager op against float64", eager[0], float64_reference(q, k, v, padding, scale),
                      tol * 10)

        # torch.compile, whole graph (a graph break raises): AOTAutograd's trace with the eager backend, and
        # Inductor, which compiles the code around the op. Forward and backward.
        for backend in ("aot_eager", "inductor"):
            torch._dynamo.reset()
            compiled = torch.compile(module, backend=backend, fullgraph=True)
            good &= compare(f"{dtype} torch.compile({backend}, fullgraph=True)",
                            forward_and_grads(compiled, cot, q, k, v, padding), eager, tol)

        # Dynamic shapes: the Meta kernels read sizes as SymInt, so one graph serves every sequence length.
        # Five lengths through torch.compile(dynamic=True) compile once (Dynamo's count of unique graphs; a
        # recompile for a new length would add one), and every result is bitwise the eager op's.
        for backend in ("aot_eager", "inductor"):
            torch._dynamo.reset()
            counters.clear()
            dynamic = torch.compile(module, backend=backend, dynamic=True, fullgraph=True)
            for T in (40, 57, 64, 91, 130):
                q2, k2, v2, p2 = inputs(1, 2, T, 32, dtype, seed=T)
                cot2 = torch.randn(1, 2, T, 32, generator=torch.Generator().manual_seed(3), dtype=dtype)
                good &= compare(f"{dtype} torch.compile({backend}, dynamic=True) T={T}",
                                forward_and_grads(dynamic, cot2, q2, k2, v2, p2),
                                forward_and_grads(module, cot2, q2, k2, v2, p2), 0.0)
            graphs = counters["stats"]["unique_graphs"]
            good &= check(f"{dtype} torch.compile({backend}, dynamic=True): one graph for 5 lengths", graphs == 1,
                          f"{graphs} graph(s), recompiles {dict(counters['recompiles'])}")

        # torch.export with the sequence length as a Dim: one program, run at three lengths it was not traced
        # with, forward and backward, bitwise the eager op.
        T = torch.export.Dim("T", min=2, max=4096)
        shapes = ({2: T}, {2: T}, {2: T}, {2: T})
        by_length = torch.export.export(module, (q, k, v, padding), dynamic_shapes=shapes)
        for L in (33, 100, 257):
            qL, kL, vL, pL = inputs(2, 3, L, 32, dtype, seed=L)
            cotL = torch.randn(2, 3, L, 32, generator=torch.Generator().manual_seed(4), dtype=dtype)
            good &= compare(f"{dtype} torch.export(Dim T) at T={L}",
                            forward_and_grads(by_length.module(), cotL, qL, kL, vL, pL),
                            forward_and_grads(module, cotL, qL, kL, vL, pL), 0.0)

        # torch.export: the op is one node of the exported graph, and the exported program runs forward and
        # backward like the eager op.
        exported = torch.export.export(module, (q, k, v, padding))
        ops = {str(n.target) for n in exported.graph.nodes if n.op == "call_function"}
        good &= check(f"{dtype} torch.export graph calls attn.flash_attention",
                      "attn.flash_attention.default" in ops, f"ops {sorted(ops)}")
        good &= compare(f"{dtype} torch.export", forward_and_grads(exported.module(), cot, q, k, v, padding), eager,
                        tol)

    good &= check_packed_sequences()
    good &= check_causal_offset()
    good &= check_decode_attention()
    good &= check_linear_rows()
    print("all passed" if good else "FAILURES")
    return 0 if good else 1


def one_graph(name, make_compiled, run_all):
    """Compiles with dynamic=True, runs every case, and checks Dynamo made one graph for all of them."""
    torch._dynamo.reset()
    counters.clear()
    good = run_all(make_compiled())
    graphs = counters["stats"]["unique_graphs"]
    return good & check(f"{name}: one graph", graphs == 1,
                        f"{graphs} graph(s), recompiles {dict(counters['recompiles'])}")


def check_packed_sequences():
    """Packed (varlen) sequences: the packed length is symbolic, the boundaries are data."""
    def packed(q, k, v, cu):
        out, _ = torch.ops.attn.flash_attention(q, k, v, is_causal=True, cu_seqlens_q=cu, cu_seqlens_k=cu)
        return out

    def case(lengths):
        cu = torch.tensor([0] + list(itertools.accumulate(lengths)), dtype=torch.long)
        q, k, v, _ = inputs(1, 2, int(cu[-1]), 16, torch.float32, seed=sum(lengths))
        cot = torch.randn_like(q)
        return q, k, v, cu, cot

    cases = [case(lengths) for lengths in ((5, 9, 3), (17, 2, 11), (8, 8, 8), (30, 1, 4), (3, 40, 12))]
    good = True
    # The eager op against float64 attention of each sequence alone.
    q, k, v, cu, _ = cases[0]
    eager = packed(q, k, v, cu)
    want = torch.cat([float64_reference(q[..., a:b, :], k[..., a:b, :], v[..., a:b, :],
                                        torch.zeros(1, 1, b - a, dtype=torch.bool), 1 / 4)
                      for a, b in zip(cu[:-1].tolist(), cu[1:].tolist())], dim=2)
    good &= close("packed sequences: eager op against float64", eager, want, 2e-5)

    def run_all(compiled):
        ok = True
        for q, k, v, cu, cot in cases:
            ok &= compare(f"packed sequences, torch.compile(dynamic=True) total={q.shape[2]}",
                          forward_and_grads(compiled, cot, q, k, v, cu),
                          forward_and_grads(packed, cot, q, k, v, cu), 0.0)
        return ok

    return good & one_graph("packed sequences, torch.compile(aot_eager, dynamic=True), 5 packed lengths",
                            lambda: torch.compile(packed, backend="aot_eager", dynamic=True, fullgraph=True),
                            run_all)


def check_causal_offset():
    """causal_offset is a SymInt of the schema: a trace keeps it symbolic, so a chunk of queries against a cache
    of any length (causal_offset = Tk - Tq, as attn_torch.transformers passes it) is one graph, and so is an
    offset passed as an integer argument; torch.export and AOTInductor take the cache length as a Dim. With an
    int in the schema, each new value was a new graph."""
    def chunk(q, k, v):
        out, _ = torch.ops.attn.flash_attention(q, k, v, is_causal=True, causal_offset=k.shape[2] - q.shape[2])
        return out

    def shifted(q, k, v, offset):
        out, _ = torch.ops.attn.flash_attention(q, k, v, is_causal=True, causal_offset=offset)
        return out

    def case(tk, tq=3):
        g = torch.Generator().manual_seed(tk)
        q = torch.randn(1, 2, tq, 16, generator=g)
        k, v = (torch.randn(1, 2, tk, 16, generator=g) for _ in range(2))
        return q, k, v, torch.randn(1, 2, tq, 16, generator=g)

    # The eager op against float64 at every case and offset below; the compiled and exported runs against it.
    cache_cases = [case(tk) for tk in (20, 33, 47, 61, 90)]
    export_cases = [case(tk) for tk in (41, 77, 300)]
    offset_case, offsets = case(40, tq=12), (2, 5, 9, 14)
    good = True
    for q, k, v, _ in cache_cases + export_cases:
        good &= close(f"causal_offset = Tk - Tq: eager op against float64, Tk={k.shape[2]}", chunk(q, k, v),
                      float64_reference(q, k, v, None, 16 ** -0.5, k.shape[2] - q.shape[2]), 2e-5)
    for offset in offsets:
        good &= close(f"causal_offset = {offset}: eager op against float64", shifted(*offset_case[:3], offset),
                      float64_reference(*offset_case[:3], None, 16 ** -0.5, offset), 2e-5)

    def run_cache(compiled):
        ok = True
        for q, k, v, cot in cache_cases:
            ok &= compare(f"causal_offset = Tk - Tq, torch.compile(dynamic=True) Tk={k.shape[2]}",
                          forward_and_grads(compiled, cot, q, k, v), forward_and_grads(chunk, cot, q, k, v), 0.0)
        return ok

    for backend in ("aot_eager", "inductor"):
        good &= one_graph(f"causal_offset = Tk - Tq, torch.compile({backend}, dynamic=True), 5 cache lengths",
                          lambda: torch.compile(chunk, backend=backend, dynamic=True, fullgraph=True), run_cache)

    # torch.export with the cache length as a Dim: the graph passes Tk - Tq symbolically (with an int in the
    # schema, export refused the Dim: "specialized it to be a constant"). AOTInductor compiles that program, and
    # its package (the proxy executor that calls the op, as a C++ host's) runs at cache lengths it was not traced
    # with.
    class Chunk(torch.nn.Module):
        def forward(self, q, k, v):
            return chunk(q, k, v)

    Tk = torch.export.Dim("Tk", min=4, max=4096)
    exported = torch.export.export(Chunk(), cache_cases[0][:3], dynamic_shapes=({}, {2: Tk}, {2: Tk}))
    with tempfile.TemporaryDirectory() as folder, torch.no_grad():
        package = torch._inductor.aoti_load_package(torch._inductor.aoti_compile_and_package(
            exported, package_path=os.path.join(folder, "chunk.pt2")))
        for q, k, v, _ in export_cases:
            want = chunk(q, k, v)
            good &= close(f"causal_offset = Tk - Tq, torch.export(Dim Tk) at Tk={k.shape[2]}",
                          exported.module()(q, k, v), want, 0.0)
            good &= close(f"causal_offset = Tk - Tq, AOTInductor package at Tk={k.shape[2]}", package(q, k, v),
                          want, 0.0)

    q, k, v, cot = offset_case

    def run_offsets(compiled):
        ok = True
        for offset in offsets:
            ok &= compare(f"causal_offset = {offset} argument, torch.compile(dynamic=True)",
                          forward_and_grads(compiled, cot, q, k, v, offset),
                          forward_and_grads(shifted, cot, q, k, v, offset), 0.0)
        return ok

    return good & one_graph("causal_offset argument, torch.compile(aot_eager, dynamic=True), 4 offsets",
                            lambda: torch.compile(shifted, backend="aot_eager", dynamic=True, fullgraph=True),
                            run_offsets)


def decode_reference(q, k, v, starts, lengths):
    """float64: query t of row b, at position starts[b] + t, attends the keys j <= its position, j < lengths[b]."""
    B, H, Tq, d = q.shape
    group = H // k.shape[1]
    out = torch.zeros(B, H, Tq, v.shape[-1], dtype=torch.float64)
    for b in range(B):
        n = int(lengths[b])
        for t in range(Tq):
            allowed = min(int(starts[b]) + t + 1, n)
            for h in range(H):
                scores = q[b, h, t].double() @ k[b, h // group, :allowed].double().T / math.sqrt(d)
                out[b, h, t] = torch.softmax(scores, -1) @ v[b, h // group, :allowed].double()
    return out


def check_decode_attention():
    """attn::decode_attention over a cache whose capacity (and the step's query count) changes from call to call."""
    def step(q, k, v, starts, lengths):
        return torch.ops.attn.decode_attention(q, k, v, starts, lengths)

    def case(capacity, tq):
        # Sizes all different from each other: Dynamo gives equal sizes one symbol at the first trace ("duck
        # sizing"), and would recompile when they part.
        g = torch.Generator().manual_seed(capacity)
        q = torch.randn(3, 10, tq, 16, generator=g)
        k, v = (torch.randn(3, 5, capacity, 16, generator=g) for _ in range(2))
        lengths = torch.tensor([capacity, capacity - 4, capacity // 2])
        return q, k, v, lengths - tq, lengths

    cases = [case(capacity, tq) for capacity, tq in ((20, 2), (33, 6), (47, 2), (61, 4), (90, 7))]
    good = True
    with torch.no_grad():
        q, k, v, starts, lengths = cases[1]
        good &= close("decode_attention: eager op against float64", step(q, k, v, starts, lengths),
                      decode_reference(q, k, v, starts, lengths), 2e-5)

        def run_all(compiled):
            ok = True
            for c in cases:
                ok &= close(f"decode_attention, torch.compile(dynamic=True) capacity={c[1].shape[2]} "
                            f"Tq={c[0].shape[2]}", compiled(*c), step(*c), 0.0)
            return ok

        for backend in ("aot_eager", "inductor"):
            good &= one_graph(f"decode_attention, torch.compile({backend}, dynamic=True), 5 capacities",
                              lambda: torch.compile(step, backend=backend, dynamic=True, fullgraph=True), run_all)

        class Step(torch.nn.Module):
            def forward(self, q, k, v, starts, lengths):
                return step(q, k, v, starts, lengths)

        capacity = torch.export.Dim("capacity", min=8, max=4096)
        exported = torch.export.export(Step(), cases[0], dynamic_shapes=({}, {2: capacity}, {2: capacity}, {}, {}))
        for c in (case(41, 2), case(77, 2), case(300, 2)):
            good &= close(f"decode_attention, torch.export(Dim capacity) at capacity={c[1].shape[2]}",
                          exported.module()(*c), step(*c), 0.0)
    return good


def check_linear_rows():
    """attn::linear_rows over a changing number of rows (at most 16: the op's limit, a guard of the graph)."""
    g = torch.Generator().manual_seed(7)
    weight, bias = torch.randn(24, 40, generator=g), torch.randn(24, generator=g)

    def project(x):
        return torch.ops.attn.linear_rows(x, weight, bias)

    xs = [torch.randn(n, 40, generator=g) for n in (2, 5, 9, 12, 16)]
    good = True
    with torch.no_grad():
        good &= close("linear_rows: eager op against float64", project(xs[1]),
                      xs[1].double() @ weight.double().T + bias.double(), 1e-4)

        def run_all(compiled):
            ok = True
            for x in xs:
                ok &= close(f"linear_rows, torch.compile(dynamic=True) rows={x.shape[0]}", compiled(x), project(x), 0.0)
            return ok

        for backend in ("aot_eager", "inductor"):
            good &= one_graph(f"linear_rows, torch.compile({backend}, dynamic=True), 5 row counts",
                              lambda: torch.compile(project, backend=backend, dynamic=True, fullgraph=True), run_all)
    return good


if __name__ == "__main__":
    sys.exit(main())
