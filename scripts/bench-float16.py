#!/usr/bin/env python3
"""attn's fused op against PyTorch's own CPU attention in float16, in one process, for bench/RESULTS.md.

  .venv-torch/bin/python scripts/bench-float16.py --library build-torch-pip/libattn.so

For each shape, q, k and v [1, H, T, d] in float16: torch.ops.attn.flash_attention (float16 computed in
float32 on attn's float kernel) and F.scaled_dot_product_attention (PyTorch's CPU flash attention), one call
of each in turn per round. Reports the medians of the rounds, the median of the rounds' own ratios (SDPA's
time over attn's: above 1, attn is faster), and each one's mean absolute error from the float64 definition on
the same float16 inputs. Forward pass only, no gradient recorded.
"""
import argparse
import statistics
import sys
import time

import torch
import torch.nn.functional as F


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], epilog=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--library", default="build-torch-pip/libattn.so", help="attn's library (default: %(default)s)")
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: every core)")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--head-dim", type=int, default=64)
    parser.add_argument("--lengths", default="1024,2048,4096", help="comma-separated T (default: %(default)s)")
    args = parser.parse_args()
    torch.ops.load_library(args.library)
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    print(f"bench-float16: PyTorch {torch.__version__}, {torch.get_num_threads()} threads, "
          f"[1, {args.heads}, T, {args.head_dim}] float16, {args.rounds} rounds", file=sys.stderr)
    print("| call | T | attn ms | SDPA ms | SDPA / attn | attn error | SDPA error |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    with torch.no_grad():
        for causal in (False, True):
            for T in (int(t) for t in args.lengths.split(",")):
                q, k, v = (torch.randn(1, args.heads, T, args.head_dim).half() for _ in range(3))

                def ours():
                    return torch.ops.attn.flash_attention(q, k, v, None, None, None, causal, 0, None)[0]

                def theirs():
                    return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

                reference = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), is_causal=causal)
                error_ours = (ours().double() - reference).abs().mean().item()
                error_theirs = (theirs().double() - reference).abs().mean().item()
                mine, peer, ratios = [], [], []
                for r in range(args.rounds):
                    print(f"bench-float16: {'causal' if causal else 'noncausal'} T={T} round {r + 1}/{args.rounds}",
                          file=sys.stderr, end="\r")
                    start = time.perf_counter()
                    ours()
                    middle = time.perf_counter()
                    theirs()
                    end = time.perf_counter()
                    mine.append(middle - start)
                    peer.append(end - middle)
                    ratios.append((end - middle) / (middle - start))
                print(f"| {'causal' if causal else 'noncausal'} | {T} | {statistics.median(mine) * 1e3:.1f} | "
                      f"{statistics.median(peer) * 1e3:.1f} | {statistics.median(ratios):.2f}x | "
                      f"{error_ours:.2e} | {error_theirs:.2e} |", flush=True)
    print(file=sys.stderr)


if __name__ == "__main__":
    main()
