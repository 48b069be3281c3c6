#!/usr/bin/env python3
"""Summarises several attn-bench --json runs of the same suite as one Markdown table: ours against the peer.

    for r in 1 2 3 4; do attn-bench --suite peer --json peer-$r.json; done
    python3 scripts/bench-rounds.py peer-*.json

Each row pairs one of ours (fused, attn_mha) with its peer measured in the same run (torch_sdpa, torch_mha).
The speedup is peer ms / ours ms within each run; the table gives the median of those per-run speedups, their
range, and the median times. One run on a shared 2-core machine moves by 15-20 %, so rounds are what make a
ratio worth quoting. Plain Python 3, no packages.
"""
import argparse
import json
import statistics
import sys

PEERS = {"fused": "torch_sdpa", "attn_mha": "torch_mha"}


def row_key(record):
    """The configuration without the implementation: what ours and the peer share."""
    parts = record["name"].split("/")
    return tuple(parts[:1] + parts[2:])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", help="attn-bench --json files of the same suite")
    args = parser.parse_args()

    runs = []
    for path in args.runs:
        with open(path) as f:
            runs.append({r["name"]: r for r in json.load(f) if r.get("ms_median") is not None})

    names = [n for n in runs[0] if n.split("/")[1] in PEERS]
    print(f"| configuration | ours | ours ms | peer ms | speedup (median of {len(runs)} runs) | range |")
    print("|---|---|---:|---:|---:|---|")
    for name in names:
        ours_impl = name.split("/")[1]
        peer_name = name.replace(f"/{ours_impl}/", f"/{PEERS[ours_impl]}/", 1)
        pairs = [(run[name]["ms_median"], run[peer_name]["ms_median"]) for run in runs
                 if name in run and peer_name in run]
        if not pairs:
            continue
        ratios = [peer / ours for ours, peer in pairs]
        label = "/".join(row_key(runs[0][name]))
        print(f"| {label} | {ours_impl} | {statistics.median(o for o, _ in pairs):.2f} | "
              f"{statistics.median(p for _, p in pairs):.2f} | {statistics.median(ratios):.2f}x | "
              f"{min(ratios):.2f}-{max(ratios):.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
