"""attn's TorchScript exports (attn::jit::to_torchscript), loaded and run by plain PyTorch, without attn.

Run by CTest after the C++ writer (Export.WritesFilesForPython, a CTest fixture):
    /usr/bin/python3 tests/python/test_torchscript.py --dir build/tests/from_cpp/export
For every <case>.pt there is <case>.inputs.pt, a dict of the forward arguments by name, "expected" (what the
C++ module computed) and "param:<name>" for each parameter of the C++ module. The script loads the module with
torch.jit.load, checks its parameters (names, order, values), runs it in eval mode and compares the output.
"""
import argparse
import pathlib
import sys

import torch

TOLERANCE = 1e-6


def max_difference(a, b):
    """max |a - b| over finite elements; inf when shapes or the NaN/Inf positions differ."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return float("inf")
    a, b = a.double(), b.double()
    if not torch.equal(a.isnan(), b.isnan()) or not torch.equal(a.isinf(), b.isinf()):
        return float("inf")
    if not torch.equal(a[a.isinf()], b[b.isinf()]):
        return float("inf")
    finite = a.isfinite()
    return (a[finite] - b[finite]).abs().max().item() if finite.any() else 0.0


def check_case(module_path):
    name = module_path.name[: -len(".pt")]
    # Saved by torch::pickle_save: its typed containers (torch.jit._pickle.restore_type_tag) are not among what
    # torch.load's weights_only default (True from 2.6) accepts.
    data = torch.load(str(module_path.with_name(name + ".inputs.pt")), weights_only=False)
    module = torch.jit.load(str(module_path))
    module.eval()
    failures = []

    params = {k[len("param:"):]: v for k, v in data.items() if k.startswith("param:")}
    exported = dict(module.named_parameters())
    if list(exported) != list(params):
        failures.append(f"parameter names {list(exported)} != C++ {list(params)}")
    for key, value in params.items():
        if key in exported and not torch.equal(exported[key].detach(), value):
            failures.append(f"parameter {key} differs")

    expected = data["expected"]
    inputs = {k: v for k, v in data.items() if k != "expected" and not k.startswith("param:")}
    if "query" in inputs and "key" not in inputs:  # MultiHeadAttention self-attention: one tensor three times
        inputs["key"] = inputs["value"] = inputs["query"]
    with torch.no_grad():
        output = module(**inputs)
    difference = max_difference(output, expected)
    if difference > TOLERANCE:
        failures.append(f"output differs from C++ by {difference} (shape {tuple(output.shape)} vs {tuple(expected.shape)})")

    print(f"{name}: {type(module).__name__} {module.original_name}, {len(exported)} parameters, "
          f"max |difference| {difference:.3g}" + ("" if not failures else "  FAILED"))
    for failure in failures:
        print(f"  {failure}")
    return not failures


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", required=True, type=pathlib.Path, help="where Export.WritesFilesForPython wrote")
    args = parser.parse_args()
    cases = sorted(p for p in args.dir.glob("*.pt") if not p.name.endswith(".inputs.pt"))
    if not cases:
        print(f"no exported modules in {args.dir}")
        return 1
    ok = all([check_case(p) for p in cases])
    print(f"{len(cases)} exported modules checked: " + ("ok" if ok else "FAILED"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
