"""Seed corpora for the weight-file fuzzers (tests/fuzz/fuzz_*.cpp), and a libFuzzer dictionary for each.

Run by scripts/sanitize-and-fuzz.sh with /usr/bin/python3 (Debian's python3-torch):

    make_corpus.py --out build-sanitize/fuzz/seeds [--weights build-sanitize/tests/weights]

writes OUT/torch_zip/, OUT/torch_legacy/ and OUT/safetensors/ (each emptied first) with small valid files of
that format, and OUT/<format>.dict. The seeds are:
  - the state_dicts that tests/reference/make_weights.py wrote (--weights: *.zip.pt, *.legacy.pt,
    *.safetensors), i.e. torch.nn.MultiheadAttention and the notebooks' classes, with _metadata;
  - files that fit the fuzz targets' MultiHeadAttention(4, 2), under attn's, torch.nn.MultiheadAttention's and
    the notebooks' names, so that mutations reach the name mapping and the copy into the module;
  - the corners of the formats: every dtype, 0-d and empty tensors, views with offsets and strides into a
    shared storage, nested dicts, nn.Parameter, a plain dict and an OrderedDict, an empty dict.
Everything is seeded, so the corpus is the same on every run.
"""
import argparse
import collections
import glob
import json
import os
import shutil
import struct

import torch
import torch.nn as nn

SAFETENSORS_DTYPES = {
    torch.float64: "F64", torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16", torch.int64: "I64",
    torch.int32: "I32", torch.int16: "I16", torch.int8: "I8", torch.uint8: "U8", torch.bool: "BOOL",
}
SAME_WIDTH_INT = {2: torch.int16, 4: torch.int32, 8: torch.int64}


def tensor_bytes(t):
    t = t.detach().contiguous().cpu()
    if t.dtype in (torch.bfloat16, torch.float16):
        t = t.view(torch.int16)  # numpy has no bfloat16; the bytes are the same
    return t.numpy().tobytes()


def safetensors_bytes(tensors, metadata=True):
    header, blobs, offset = {}, [], 0
    for name, t in tensors.items():
        data = tensor_bytes(t)
        header[name] = {"dtype": SAFETENSORS_DTYPES[t.dtype], "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    if metadata:
        header["__metadata__"] = {"format": "pt"}
    text = json.dumps(header).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    return struct.pack("<Q", len(text)) + text + b"".join(blobs)


def mha_4_2_state(seed):
    """Tensors that fit the fuzz targets' attn::MultiHeadAttention(MultiHeadAttentionOptions(4, 2))."""
    torch.manual_seed(seed)
    return collections.OrderedDict(
        (f"{p}_proj.{w}", torch.randn(4, 4) if w == "weight" else torch.randn(4))
        for p in ("q", "k", "v", "out") for w in ("weight", "bias"))


def cases():
    """(name, object to torch.save, tensors for safetensors or None)."""
    out = []
    attn_names = mha_4_2_state(1)
    out.append(("fits_attn_names", attn_names, attn_names))

    torch.manual_seed(2)
    torch_mha = nn.MultiheadAttention(4, 2, batch_first=True).state_dict()  # in_proj_weight, with _metadata
    out.append(("fits_torch_mha", torch_mha, dict(torch_mha)))
    torch_mha_kv = nn.MultiheadAttention(4, 2, kdim=3, vdim=5, batch_first=True).state_dict()  # q/k/v_proj_weight
    out.append(("torch_mha_kdim_vdim", torch_mha_kv, dict(torch_mha_kv)))

    notebook = collections.OrderedDict()
    for ours, theirs in (("q_proj", "w_q"), ("k_proj", "w_k"), ("v_proj", "w_v"), ("out_proj", "w_combine")):
        for w in ("weight", "bias"):
            notebook[f"{theirs}.{w}"] = attn_names[f"{ours}.{w}"].clone()
    out.append(("fits_notebook_003", notebook, notebook))
    heads = collections.OrderedDict((f"heads.{h}.W_{x}.weight", torch.randn(2, 4)) for h in range(2) for x in "qkv")
    out.append(("notebook_001_heads", heads, heads))

    torch.manual_seed(3)
    dtypes = collections.OrderedDict(
        (str(d).replace("torch.", ""), (torch.randn(3, 2) * 10).to(d)) for d in SAFETENSORS_DTYPES)
    out.append(("every_dtype", dtypes, dtypes))
    odd = collections.OrderedDict([("scalar", torch.tensor(1.5)), ("empty", torch.zeros(0, 3)),
                                   ("one", torch.ones(1, 1, 1)), ("long_name." * 8 + "x", torch.arange(5.0))])
    out.append(("scalars_and_empty", odd, odd))

    # Views: an offset, a transpose and a step into one storage, which torch.save stores once.
    base = torch.arange(24.0).reshape(4, 6)
    views = {"base": base, "rows": base[1:3], "transposed": base.t(), "strided": base[:, ::2], "expanded":
             torch.arange(3.0).expand(2, 3)}
    out.append(("shared_storage_views", views, None))
    out.append(("nested_dicts", {"encoder": {"attn": attn_names.copy()}, "step": {"w": torch.ones(2)}}, None))
    out.append(("parameters", {n: nn.Parameter(t) for n, t in attn_names.items()}, None))
    out.append(("plain_dict", dict(attn_names), dict(attn_names)))
    out.append(("empty_dict", {}, {}))
    return out


def write_dict(path, tokens):
    with open(path, "w") as f:
        for token in tokens:
            data = token if isinstance(token, bytes) else token.encode()
            f.write('"' + "".join(chr(b) if 32 <= b < 127 and chr(b) not in '"\\' else "\\x%02x" % b
                                  for b in data) + '"\n')


PICKLE_TOKENS = [
    "collections\nOrderedDict\n", "torch._utils\n_rebuild_tensor_v2\n", "torch._utils\n_rebuild_parameter\n",
    "torch\nFloatStorage\n", "torch\nDoubleStorage\n", "torch\nHalfStorage\n", "torch\nBFloat16Storage\n",
    "torch\nLongStorage\n", "torch\nBoolStorage\n", "torch\nByteStorage\n", "storage", "cpu", "_metadata",
    "little_endian", "protocol_version", "type_sizes", b"\x80\x02", b"\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19",
    b"\x8a\x08\xff\xff\xff\xff\xff\xff\xff\x7f", b"J\xff\xff\xff\xff", b"(", b"t", b"R", b"Q", b"q\x00", b"h\x00",
    b"}", b"]", b")", b"\x85", b"\x86", b"\x87", b"u", b"s", b"b", b".", b"\x94", b"\x93",
]
ZIP_TOKENS = [b"PK\x03\x04", b"PK\x01\x02", b"PK\x05\x06", b"PK\x06\x06", b"PK\x06\x07", b"\xff\xff\xff\xff",
              b"\xff\xff", "archive/data.pkl", "archive/version", "archive/byteorder", "archive/data/0", "little",
              "big", "3\n"]
SAFETENSORS_TOKENS = ['"dtype"', '"shape"', '"data_offsets"', '"__metadata__"', '"format"', '"pt"', "[0, 64]",
                      "[]", "{}", "18446744073709551615", "9223372036854775807", "-1", "1e400"] + \
                     ['"%s"' % d for d in SAFETENSORS_DTYPES.values()] + ['"in_proj_weight"', '"q_proj.weight"',
                                                                         '"heads.0.W_q.weight"']


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True, help="directory for <format>/ seed directories and dictionaries")
    parser.add_argument("--weights", help="tests/reference/make_weights.py's output directory, to reuse its files")
    args = parser.parse_args()
    dirs = {f: os.path.join(args.out, f) for f in ("torch_zip", "torch_legacy", "safetensors")}
    for d in dirs.values():
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)

    if args.weights:
        for pattern, fmt in (("*.zip.pt", "torch_zip"), ("*.legacy.pt", "torch_legacy"),
                             ("*.safetensors", "safetensors")):
            for path in sorted(glob.glob(os.path.join(args.weights, pattern))):
                shutil.copy(path, os.path.join(dirs[fmt], "weights_" + os.path.basename(path)))

    for name, obj, tensors in cases():
        torch.save(obj, os.path.join(dirs["torch_zip"], name + ".zip.pt"))
        torch.save(obj, os.path.join(dirs["torch_legacy"], name + ".legacy.pt"), _use_new_zipfile_serialization=False)
        if tensors is not None:
            with open(os.path.join(dirs["safetensors"], name + ".safetensors"), "wb") as f:
                f.write(safetensors_bytes(tensors))

    write_dict(os.path.join(args.out, "torch_zip.dict"), ZIP_TOKENS + PICKLE_TOKENS)
    write_dict(os.path.join(args.out, "torch_legacy.dict"), PICKLE_TOKENS)
    write_dict(os.path.join(args.out, "safetensors.dict"), SAFETENSORS_TOKENS)
    counts = ", ".join("%s %d" % (f, len(os.listdir(d))) for f, d in dirs.items())
    largest = max(os.path.getsize(os.path.join(d, n)) for d in dirs.values() for n in os.listdir(d))
    print("attn fuzz seeds in %s: %s (largest %d bytes)" % (args.out, counts, largest))


if __name__ == "__main__":
    main()
