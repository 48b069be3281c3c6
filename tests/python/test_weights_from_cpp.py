"""Weights that attn (C++) saved under torch.nn.MultiheadAttention's names, loaded by PyTorch.

Run by CTest after the C++ test IoForPython.WritesWeights has written DIR/mha_*.{zip.pt,safetensors,io.pt}:
  /usr/bin/python3 tests/python/test_weights_from_cpp.py --dir build/tests/from_cpp
For each file, torch.nn.MultiheadAttention(batch_first=True).load_state_dict(..., strict=True) must accept it,
and the module's output must match the one attn computed (float32, 1e-5 of the output's scale).
"""
import argparse
import json
import struct
import sys

import torch
import torch.nn as nn

DTYPES = {"F32": torch.float32, "F64": torch.float64, "F16": torch.float16, "BF16": torch.bfloat16}


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    body = data[8 + n:]
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        t = torch.frombuffer(bytearray(body[begin:end]), dtype=DTYPES[info["dtype"]])
        out[name] = t.reshape(info["shape"])
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", required=True)
    args = parser.parse_args()
    good = True
    for name in ("mha_packed", "mha_kdim_vdim"):
        # The test's own data, saved by torch::pickle_save: its typed containers (torch.jit._pickle.restore_type_tag)
        # are not among what torch.load's weights_only default (True from 2.6) accepts. The weights below are.
        case = torch.load(f"{args.dir}/{name}.io.pt", weights_only=False)
        for suffix, read in ((".zip.pt", torch.load), (".safetensors", read_safetensors)):
            model = nn.MultiheadAttention(case["embed_dim"], case["num_heads"], bias=case["bias"],
                                          kdim=case["kdim"], vdim=case["vdim"], batch_first=True)
            model.load_state_dict(read(f"{args.dir}/{name}{suffix}"), strict=True)
            model.eval()
            with torch.no_grad():
                out = model(case["query"], case["key"], case["value"], key_padding_mask=case["key_padding_mask"],
                            need_weights=False)[0]
            expected = case["expected"]
            err = (out - expected).abs().max().item()
            tol = 1e-5 * (1 + expected.abs().max().item())
            ok = err <= tol
            good &= ok
            print(f"{'ok  ' if ok else 'FAIL'} {name}{suffix}: max abs err {err:.3e} (tol {tol:.1e})")
    print("all passed" if good else "FAILURES")
    return 0 if good else 1


if __name__ == "__main__":
    sys.exit(main())
