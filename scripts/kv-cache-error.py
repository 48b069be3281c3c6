#!/usr/bin/env python3
"""How much a KV cache's storage moves SmolLM2's greedy tokens and logits, apart from attn's kernels.

Runs transformers' float32 SmolLM2 on the reference prompts (tests' smollm2_generation.safetensors), its cache
rounded as a cache of each form stores it (a decoding step reads its own new rows rounded too, as attn's do):
float32 (untouched), bfloat16, attn's int8 rows (each row rotated by the orthonormal Walsh-Hadamard transform,
attn::hadamard_rows, then a scale max|r|/127 per token and head, elements rounded to nearest), and int8 variants
that attn does not implement: the same rows unrotated (attn's int8 cache before it rotated), unrotated with a
scale per block of 32 (llama.cpp's q8_0), and rotated keys with their per-channel mean over the prompt taken out
before rounding (the mean adds q·mean to every score of a query, which its softmax ignores).
For each form it prints the greedy tokens' agreement over 64 steps with the float32 cache and with the bfloat16
cache, and the largest and the mean teacher-forced logit error against the float32 cache; then how large the
keys' per-channel offsets are. The model runs in float32 here, so what moves the tokens is the cache alone.
bench/RESULTS.md (issue 33) has a run.

  .venv-torch/bin/python scripts/kv-cache-error.py --model build-torch-pip/tests/models/smollm2 \\
      --reference build-torch-pip/tests/reference/smollm2_generation.safetensors
"""
import argparse
import sys
import time

FORMS = ("float32", "bfloat16", "int8", "int8-unrotated", "int8-q8_0", "int8-key-mean")


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True, help="SmolLM2 folder (config.json, model.safetensors)")
    p.add_argument("--reference", required=True, help="smollm2_generation.safetensors (prompt.N, tokens.N)")
    p.add_argument("--forms", default=",".join(FORMS), help="comma-separated, of: " + ", ".join(FORMS))
    p.add_argument("--steps", type=int, default=64, help="new tokens per prompt (default 64)")
    p.add_argument("--threads", type=int, default=0, help="torch threads (default: every core)")
    return p.parse_args()


def main():
    args = parse_args()
    forms = args.forms.split(",")
    for f in forms:
        if f not in FORMS:
            sys.exit(f"kv-cache-error.py: unknown form '{f}' (expected one of {', '.join(FORMS)})")
    import os
    for path, what in ((os.path.join(args.model, "config.json"), "--model"), (args.reference, "--reference")):
        if not os.path.isfile(path):
            sys.exit(f"kv-cache-error.py: {what}: no file {path} (make test TORCH=pip builds both under build-torch-pip/tests)")
    import torch
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM, DynamicCache
    from transformers.cache_utils import DynamicLayer

    torch.set_num_threads(args.threads or os.cpu_count())
    ref = load_file(args.reference)
    prompts = [ref[f"prompt.{n}"].long() for n in range(len([k for k in ref if k.startswith("prompt.")]))]
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32).eval()

    def int8_rows(x):
        s = x.abs().amax(-1, keepdim=True) / 127
        s = torch.where(s > 0, s, torch.ones_like(s))
        return torch.round(x / s).clamp(-127, 127) * s

    def q8_0(x):
        shape = x.shape
        return int8_rows(x.reshape(*shape[:-1], shape[-1] // 32, 32)).reshape(shape)

    hadamards = {}

    def hadamard(d):
        """attn::hadamard_rows as a matrix: block-diagonal, blocks of the largest power of two dividing d."""
        if d not in hadamards:
            n = d & -d
            h = torch.ones(1, 1)
            while h.shape[0] < n:
                h = torch.cat([torch.cat([h, h], 1), torch.cat([h, -h], 1)], 0)
            hadamards[d] = torch.block_diag(*[h / n ** 0.5] * (d // n))
        return hadamards[d]

    def rotated_int8_rows(x):
        h = hadamard(x.shape[-1])
        return int8_rows(x @ h) @ h.T

    def stored(form, key_means, layer, k, v, prompt):
        """Keys and values [B, H_kv, T, d] as a cache of `form` gives them back."""
        if form == "bfloat16":
            return k.bfloat16().float(), v.bfloat16().float()
        if form == "int8":
            return rotated_int8_rows(k), rotated_int8_rows(v)
        if form == "int8-unrotated":
            return int8_rows(k), int8_rows(v)
        if form == "int8-q8_0":
            return q8_0(k), q8_0(v)
        if form == "int8-key-mean":
            if prompt:
                key_means[layer] = k.mean(-2, keepdim=True)
            return rotated_int8_rows(k - key_means[layer]) + key_means[layer], rotated_int8_rows(v)
        return k, v

    # A decoding step appends its rows, then reads the cache, its own rows included, as stored (attn's caches do
    # the same). transformers' DynamicLayer.update appends and returns what attention reads: rounding its new
    # rows first makes it such a cache. A prompt attends over its own rows as computed (attn's prompt into empty
    # rows does too), and they are stored rounded after it.
    rounding = {}
    plain_update = DynamicLayer.update

    def rounding_update(self, key_states, value_states, *args, **kwargs):
        if rounding:
            key_states, value_states = stored(rounding["form"], rounding["key_means"],
                                              rounding["cache"].layers.index(self), key_states, value_states, False)
        return plain_update(self, key_states, value_states, *args, **kwargs)

    DynamicLayer.update = rounding_update

    @torch.no_grad()
    def key_offsets():
        """Per layer, over every prompt: the largest |channel mean| of the keys over the prompt in units of the
        channels' mean standard deviation, and the rows' mean largest |element| after the means are taken out
        against before."""
        ratios, shrink = [], []
        for p in prompts:
            cache = DynamicCache()
            model(p[None], past_key_values=cache, use_cache=True)
            for layer in cache.layers:
                k = layer.keys[0]  # [H_kv, T, d]
                mean = k.mean(1, keepdim=True)
                ratios.append((mean.abs().amax(-1).squeeze(-1) / k.std(1).mean(-1)).mean().item())
                shrink.append(((k - mean).abs().amax(-1).mean() / k.abs().amax(-1).mean()).item())
        return ratios, shrink

    @torch.no_grad()
    def run(prompt, form, forced=None):
        cache, key_means = DynamicCache(), {}
        rounding.clear()
        out = model(prompt[None], past_key_values=cache, use_cache=True)
        for i, layer in enumerate(cache.layers):
            layer.keys, layer.values = stored(form, key_means, i, layer.keys, layer.values, True)
        rounding.update(form=form, key_means=key_means, cache=cache)
        tokens, logits = [], []
        for step in range(args.steps):
            last = out.logits[0, -1]
            logits.append(last)
            tokens.append(int(last.argmax()))
            nxt = tokens[-1] if forced is None else int(forced[step])
            out = model(torch.tensor([[nxt]]), past_key_values=cache, use_cache=True)
        rounding.clear()
        return tokens, torch.stack(logits)

    def followed(a, b):
        n = 0
        while n < min(len(a), len(b)) and a[n] == b[n]:
            n += 1
        return n

    need = list(dict.fromkeys(["float32", "bfloat16"] + forms))
    greedy, forced = {}, {}
    start = time.time()
    for form in need:
        print(f"kv-cache-error: {form} cache, {len(prompts)} prompts x {args.steps} steps, greedy and "
              f"teacher-forced ({time.time() - start:.0f} s so far)", file=sys.stderr, flush=True)
        greedy[form] = [run(p, form)[0] for p in prompts]
        reference_tokens = greedy["float32"]
        forced[form] = [run(p, form, reference_tokens[n])[1] for n, p in enumerate(prompts)]
    print(f"SmolLM2 float32, {len(prompts)} prompts x {args.steps} greedy steps; caches rounded as each form stores them")
    print("| cache | steps following the float32 cache, per prompt | prompts identical to the float32 cache | "
          "to the bfloat16 cache | largest teacher-forced logit error vs float32 | vs the bfloat16 cache's | "
          "mean |logit error| | vs the bfloat16 cache's |")
    print("|---|---|---|---|---|---|---|---|")
    bf16_error = max((forced["bfloat16"][n] - forced["float32"][n]).abs().max().item() for n in range(len(prompts)))

    def mean_error(form):
        return sum((forced[form][n] - forced["float32"][n]).abs().mean().item() for n in range(len(prompts))) / len(prompts)
    for form in need:
        kept = [followed(greedy[form][n], greedy["float32"][n]) for n in range(len(prompts))]
        same32 = sum(greedy[form][n] == greedy["float32"][n] for n in range(len(prompts)))
        same16 = sum(greedy[form][n] == greedy["bfloat16"][n] for n in range(len(prompts)))
        error = max((forced[form][n] - forced["float32"][n]).abs().max().item() for n in range(len(prompts)))
        ratio = f"{error / bf16_error:.2f}x" if bf16_error > 0 else "-"
        mean = mean_error(form)
        mean_ratio = f"{mean / mean_error('bfloat16'):.2f}x" if mean_error("bfloat16") > 0 else "-"
        print(f"| {form} | {' '.join(map(str, kept))} | {same32} | {same16} | {error:.3f} | {ratio} | {mean:.4f} | "
              f"{mean_ratio} |")
    ratios, shrink = key_offsets()
    print(f"Keys over each prompt, per layer and prompt ({len(ratios)}): largest |channel mean| / mean channel std "
          f"{min(ratios):.1f} to {max(ratios):.1f} (median {sorted(ratios)[len(ratios) // 2]:.1f}); rows' largest "
          f"|element| with the channel means taken out / without: {min(shrink):.2f} to {max(shrink):.2f} (median "
          f"{sorted(shrink)[len(shrink) // 2]:.2f})")


if __name__ == "__main__":
    main()
