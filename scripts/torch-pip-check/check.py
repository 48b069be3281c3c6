"""Checks the LibTorch 2.x lane's virtual environment (scripts/setup-torch-pip.sh runs it with the venv's Python).

    check.py REQUIREMENTS            the installed packages are exactly the pinned ones, and import torch works
    check.py REQUIREMENTS --full     also CPU ops, NumPy, torch.jit, torch.export and torch.compile (inductor, g++),
                                     and that the reference packages import

Each check prints one line; the first failure raises, naming what is missing.
"""
import argparse
import importlib.metadata
import os
import re
import sys
import tempfile


def normalize(name):
    return re.sub(r"[-_.]+", "-", name).lower()


def pinned(path):
    pins = {}
    for line in open(path):
        line = line.split("#", 1)[0].strip()
        if line:
            name, sep, version = line.partition("==")
            if not sep:
                sys.exit(f"{path}: '{line}' is not pinned with ==")
            pins[normalize(name)] = version.strip()
    return pins


def check_installed(requirements):
    # pip and setuptools come with the venv itself, not from the requirements.
    installed = {normalize(d.metadata["Name"]): d.version for d in importlib.metadata.distributions()}
    installed = {n: v for n, v in installed.items() if n not in ("pip", "setuptools")}
    want = pinned(requirements)
    if installed != want:
        missing = {n: v for n, v in want.items() if installed.get(n) != v}
        extra = {n: v for n, v in installed.items() if want.get(n) != v}
        raise SystemExit(f"installed packages differ from {requirements}: missing or other version {missing}, "
                         f"not pinned {extra}")
    print(f"ok: installed packages are exactly the {len(want)} pins of {requirements}")
    return want


def check_torch(want):
    import torch
    if torch.__version__.split("+")[0] != want["torch"]:
        raise SystemExit(f"torch {torch.__version__} imported, {want['torch']} pinned")
    print(f"ok: import torch {torch.__version__} (CUDA build {torch.version.cuda}) from {os.path.dirname(torch.__file__)}")
    return torch


def check_full(torch):
    import torch.nn.functional as F
    x = torch.randn(2, 3, 5, 8)
    y = F.scaled_dot_product_attention(x, x, x, is_causal=True)
    w = torch.softmax((x @ x.transpose(-2, -1) / 8 ** 0.5).masked_fill(torch.ones(5, 5, dtype=torch.bool).triu(1),
                                                                         float("-inf")), -1)
    torch.testing.assert_close(y, w @ x)
    print("ok: CPU ops (scaled_dot_product_attention against softmax(QK^T)V)")

    if x.numpy().shape != (2, 3, 5, 8):
        raise SystemExit("Tensor.numpy() gave the wrong shape")
    print("ok: NumPy interop")

    class Attend(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = torch.nn.Linear(8, 8)

        def forward(self, a):
            # gelu * 2 is pointwise work that inductor fuses into a C++ kernel of its own.
            return F.scaled_dot_product_attention(F.gelu(self.proj(a)) * 2, a, a)

    model = Attend().eval()
    expected = model(x)
    torch.testing.assert_close(torch.jit.script(model)(x), expected)
    print("ok: torch.jit.script")
    torch.testing.assert_close(torch.export.export(model, (x,)).module()(x), expected)
    print("ok: torch.export")

    # A fresh inductor cache: the compiled module must come from a C++ kernel that g++ builds now.
    with tempfile.TemporaryDirectory() as cache:
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = cache
        compiled = torch.compile(model, backend="inductor", fullgraph=True)
        torch.testing.assert_close(compiled(x), expected)
        built = [f for _, _, files in os.walk(cache) for f in files if f.endswith(".so")]
        if not built:
            raise SystemExit(f"torch.compile ran but built no C++ kernel under {cache}")
    print(f"ok: torch.compile (inductor, {len(built)} C++ kernel libraries built)")


def check_reference_imports():
    # Every pin installs with --no-deps, so a dependency missing from the list shows only at import time
    # (sentence-transformers imports scikit-learn, which imports joblib, narwhals, cloudpickle...).
    import importlib
    for module in ("transformers", "sentence_transformers", "gguf", "safetensors", "accelerate", "jinja2"):
        importlib.import_module(module)
    print("ok: the reference packages import (transformers, sentence-transformers, gguf, safetensors, accelerate, "
          "jinja2)")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("requirements")
    parser.add_argument("--full", action="store_true")
    args = parser.parse_args()
    torch = check_torch(check_installed(args.requirements))
    if args.full:
        check_full(torch)
        check_reference_imports()


if __name__ == "__main__":
    main()
