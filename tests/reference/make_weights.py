"""Weight files written by PyTorch, for attn's loaders to read (tests/test_io.cpp).

Run at build time by /usr/bin/python3:  make_weights.py --out build/tests/weights

Each case is a trained model (one SGD step, so no weight is at its initial value) saved three ways:
  CASE.zip.pt          torch.save(model.state_dict(), f)   (an OrderedDict carrying _metadata)
  CASE.legacy.pt       torch.save(..., _use_new_zipfile_serialization=False)
  CASE.safetensors     written by hand from the format's definition (Debian has no safetensors package)
and CASE.io.pt, a plain dict with the module's options, inputs and the model's output in eval mode.
manifest.txt lists the cases.
"""
import argparse
import json
import math
import os
import struct
import sys

import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_references import Nb001Attention, Nb001MultiHeadedAttention, Nb003MultiHeadAttention, \
    Nb004MultiHeadSelfAttention  # noqa: E402

SAFETENSORS_DTYPES = {torch.float32: "F32", torch.float64: "F64", torch.float16: "F16", torch.bfloat16: "BF16"}


def write_safetensors(path, tensors):
    header, blobs, offset = {}, [], 0
    for name, t in tensors.items():
        data = t.detach().contiguous().cpu().numpy().tobytes()
        header[name] = {"dtype": SAFETENSORS_DTYPES[t.dtype], "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    header["__metadata__"] = {"format": "pt"}
    text = json.dumps(header).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def train_one_step(model, forward):
    """One SGD step on a random target, so that no parameter keeps its initial value."""
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    out = forward()
    loss = (out - torch.randn_like(out)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()


def save_case(out_dir, name, model, io):
    state = model.state_dict()
    assert hasattr(state, "_metadata"), "a real state_dict carries _metadata"
    torch.save(state, os.path.join(out_dir, name + ".zip.pt"))
    torch.save(state, os.path.join(out_dir, name + ".legacy.pt"), _use_new_zipfile_serialization=False)
    write_safetensors(os.path.join(out_dir, name + ".safetensors"), state)
    torch.save(io, os.path.join(out_dir, name + ".io.pt"))


def mha_case(out_dir, name, seed, embed, heads, kdim=None, vdim=None, bias=True, tq=5, tk=7, batch=2):
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    model = nn.MultiheadAttention(embed, heads, bias=bias, kdim=kdim, vdim=vdim, batch_first=True)
    q = torch.randn(batch, tq, embed, generator=gen)
    k = torch.randn(batch, tk, kdim or embed, generator=gen)
    v = torch.randn(batch, tk, vdim or embed, generator=gen)
    padding = torch.rand(batch, tk, generator=gen) < 0.3
    padding[:, 0] = False  # every query keeps a key: nn.MultiheadAttention gives NaN otherwise
    train_one_step(model, lambda: model(q, k, v, need_weights=False)[0])
    model.eval()
    with torch.no_grad():
        expected = model(q, k, v, key_padding_mask=padding, need_weights=False)[0]
    save_case(out_dir, name, model, {
        "module": "mha", "embed_dim": embed, "num_heads": heads, "kdim": kdim or embed, "vdim": vdim or embed,
        "bias": bias, "query": q, "key": k, "value": v, "key_padding_mask": padding, "expected": expected})


def notebook_cases(out_dir, names):
    torch.manual_seed(3)
    x = torch.randn(2, 6, 8)

    m003 = Nb003MultiHeadAttention(8, 2)
    train_one_step(m003, lambda: m003(x, x, x))
    with torch.no_grad():
        save_case(out_dir, "nb003", m003, {"module": "mha", "embed_dim": 8, "num_heads": 2, "kdim": 8, "vdim": 8,
                                           "bias": True, "query": x, "key": x, "value": x,
                                           "expected": m003(x, x, x)})
    names.append("nb003")

    m004 = Nb004MultiHeadSelfAttention(8, 4)
    train_one_step(m004, lambda: m004(x))
    with torch.no_grad():
        save_case(out_dir, "nb004", m004, {"module": "mha", "embed_dim": 8, "num_heads": 4, "kdim": 8, "vdim": 8,
                                           "bias": True, "query": x, "key": x, "value": x, "expected": m004(x)})
    names.append("nb004")

    # 001: independent full-width heads, concatenated, no output projection; unbatched [T, d_model].
    x1 = torch.randn(4, 3)
    m001 = Nb001MultiHeadedAttention(3, num_heads=2)
    train_one_step(m001, lambda: m001(x1, x1, x1))
    with torch.no_grad():
        save_case(out_dir, "nb001_multi", m001, {"module": "mha_concat", "embed_dim": 3, "num_heads": 2,
                                                 "kdim": 3, "vdim": 3, "bias": False, "query": x1, "key": x1,
                                                 "value": x1, "expected": m001(x1, x1, x1)})
    names.append("nb001_multi")

    h001 = Nb001Attention(3)
    train_one_step(h001, lambda: h001(x1, x1, x1))
    with torch.no_grad():
        save_case(out_dir, "nb001_head", h001, {"module": "head", "d_in": 3, "d_k": 3, "d_v": 3, "bias": False,
                                                "query": x1, "key": x1, "value": x1,
                                                "expected": h001(x1, x1, x1)})
    names.append("nb001_head")


def checkpoint_cases(out_dir):
    """Files as real training code leaves them, for the loader's prefix, nested-key, skip and refusal paths:
      encoder_layer.zip.pt   an nn.TransformerEncoderLayer's state_dict (attention under "self_attn.")
      encoder_layer.io.pt    its self_attn's input and output in eval mode
      checkpoint.zip.pt      {"model": that state_dict, "step": 5, "name": "run-1", "lr": 0.1, "history": [...]}
      checkpoint.legacy.pt   the same in the legacy format
      torchscript.pt         torch.jit.script(nn.Linear(4, 4)).save(...)
      pickled_module.pt      torch.save(nn.Linear(4, 4), ...): a whole module, pickled
    """
    torch.manual_seed(11)
    layer = nn.TransformerEncoderLayer(d_model=16, nhead=4, dim_feedforward=32, batch_first=True)
    x = torch.randn(2, 5, 16)
    train_one_step(layer, lambda: layer(x))
    layer.eval()
    with torch.no_grad():
        expected = layer.self_attn(x, x, x, need_weights=False)[0]
    state = layer.state_dict()
    torch.save(state, os.path.join(out_dir, "encoder_layer.zip.pt"))
    torch.save({"embed_dim": 16, "num_heads": 4, "query": x, "expected": expected},
               os.path.join(out_dir, "encoder_layer.io.pt"))
    checkpoint = {"model": state, "step": 5, "name": "run-1", "lr": 0.1, "history": [1.0, 0.5]}
    torch.save(checkpoint, os.path.join(out_dir, "checkpoint.zip.pt"))
    torch.save(checkpoint, os.path.join(out_dir, "checkpoint.legacy.pt"), _use_new_zipfile_serialization=False)
    torch.jit.script(nn.Linear(4, 4)).save(os.path.join(out_dir, "torchscript.pt"))
    torch.save(nn.Linear(4, 4), os.path.join(out_dir, "pickled_module.pt"))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    torch.set_num_threads(1)
    names = []
    mha_case(args.out, "mha_packed", 1, embed=16, heads=4)
    names.append("mha_packed")
    mha_case(args.out, "mha_kdim_vdim", 2, embed=12, heads=3, kdim=10, vdim=6, bias=False)
    names.append("mha_kdim_vdim")
    notebook_cases(args.out, names)
    checkpoint_cases(args.out)
    with open(os.path.join(args.out, "manifest.txt"), "w") as f:
        f.write("\n".join(names) + "\n")
    print("attn weights: %d cases from torch %s in %s" % (len(names), torch.__version__, args.out))


if __name__ == "__main__":
    main()
