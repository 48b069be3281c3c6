#!/usr/bin/env python3
"""How a decoding step of attn-generate divides its time among LibTorch operations.

Builds scripts/op-times.cpp against the build's LibTorch, runs attn-generate under it with 1 and with N + 1 new
tokens (alternated, --repeats times each), and prints per decoding step: each top-level operation's count and
time (the medians of the runs' differences, divided by N), their sum, and the step's own time from
attn-generate's report. What the operations' sum leaves of the step is the work between operations: the app's
own loops (RMSNorm), tensor bookkeeping, allocation, and part of the hook's own cost (about half a microsecond an
operation on a Zen 4, mostly outside the timed span). Needs only the standard library and a C++ compiler.

  python3 scripts/decode-op-times.py --build build --model models/smollm2 --dtype bfloat16
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=__doc__.split("\n\n", 1)[1])
    p.add_argument("--build", default=os.path.join(ROOT, "build"), help="a build folder with attn-generate (default: build)")
    p.add_argument("--model", default=os.path.join(ROOT, "models", "smollm2"), help="a converted model folder")
    p.add_argument("--dtype", default="bfloat16", choices=("float32", "bfloat16"))
    p.add_argument("--tokens", type=int, default=200, help="decoding steps timed (default: 200)")
    p.add_argument("--repeats", type=int, default=3, help="runs of each length (default: 3)")
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="CPU threads (default: every core)")
    args = p.parse_args()
    for name in ("tokens", "repeats", "threads"):
        if getattr(args, name) < 1:
            p.error(f"--{name} must be at least 1, got {getattr(args, name)}")
    return args


def torch_prefix(build):
    """The LibTorch that `build` was configured with: the folder above its share/cmake/Torch (or lib/.../cmake)."""
    cache = os.path.join(build, "CMakeCache.txt")
    if not os.path.exists(cache):
        sys.exit(f"decode-op-times: {cache} not found: configure and build first (make build)")
    with open(cache, encoding="utf-8") as f:
        match = re.search(r"^Torch_DIR:PATH=(.*)$", f.read(), re.M)
    if not match:
        sys.exit(f"decode-op-times: no Torch_DIR in {cache}")
    return os.path.normpath(os.path.join(match.group(1), "..", "..", ".."))


def build_hook(build, out_dir):
    prefix = torch_prefix(build)
    flags = []
    if os.path.isdir(os.path.join(prefix, "include", "ATen")):  # a wheel's or an unpacked LibTorch's layout
        flags += ["-I", os.path.join(prefix, "include")]
    lib = os.path.join(prefix, "lib")
    if os.path.exists(os.path.join(lib, "libtorch_cpu.so")):
        flags += ["-L", lib, f"-Wl,-rpath,{lib}"]
    hook = os.path.join(out_dir, "op-times.so")
    # C++20: LibTorch 2.x's headers need it, and 1.13's compile under it as well.
    command = ["g++", "-O2", "-std=c++20", "-shared", "-fPIC", os.path.join(ROOT, "scripts", "op-times.cpp"), "-o",
               hook, *flags, "-ltorch_cpu", "-lc10"]
    print("decode-op-times: building the hook:", " ".join(command), file=sys.stderr)
    try:
        subprocess.run(command, check=True)
    except (OSError, subprocess.CalledProcessError) as e:
        sys.exit(f"decode-op-times: could not build the hook ({e}); it needs g++ and the LibTorch headers of {build}")
    return hook


def run(app, hook, args, new_tokens):
    env = dict(os.environ, LD_PRELOAD=hook)
    command = [app, "--model", args.model, "--prompt", "Hi", "--raw", "--max-new-tokens", str(new_tokens),
               "--ignore-eos", "--dtype", args.dtype, "--threads", str(args.threads)]
    done = subprocess.run(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if done.returncode != 0:
        sys.exit(f"decode-op-times: {' '.join(command)} failed:\n{done.stderr}")
    ops = {}
    for line in done.stderr.splitlines():
        if line.startswith("op-times "):
            name, count, seconds = line[len("op-times "):].rsplit(" ", 2)
            ops[name] = (int(count), float(seconds))
    decode = re.search(r"decode (\d+) tokens? in ([0-9.]+) s", done.stderr)
    if not ops or not decode:
        sys.exit(f"decode-op-times: no timings in attn-generate's report:\n{done.stderr}")
    return ops, int(decode.group(1)), float(decode.group(2))


def main():
    args = parse_args()
    app = os.path.join(args.build, "apps", "generate", "attn-generate")
    if not os.path.exists(app):
        sys.exit(f"decode-op-times: {app} not found: build the apps first (make build)")
    with tempfile.TemporaryDirectory() as tmp:
        hook = build_hook(args.build, tmp)
        rounds = []  # per pair of runs: name -> (count, seconds) per step
        step_times = []
        for r in range(args.repeats):
            print(f"decode-op-times: round {r + 1}/{args.repeats}", file=sys.stderr)
            short, _, _ = run(app, hook, args, 1)
            long, steps, seconds = run(app, hook, args, args.tokens + 1)
            step_times.append(seconds / steps)
            round_ops = {}
            for name in set(short) | set(long):
                c0, s0 = short.get(name, (0, 0.0))
                c1, s1 = long.get(name, (0, 0.0))
                round_ops[name] = ((c1 - c0) / args.tokens, (s1 - s0) / args.tokens)
            rounds.append(round_ops)
    rows = []
    for name in set().union(*rounds):
        pairs = [r.get(name, (0.0, 0.0)) for r in rounds]  # an operation missing from a round ran 0 times in it
        count = statistics.median(c for c, _ in pairs)
        if count > 0:
            rows.append((statistics.median(s for _, s in pairs), count, name))
    rows.sort(reverse=True)
    step = statistics.median(step_times)
    total = sum(s for s, _, _ in rows)
    print(f"\n{args.dtype}, {args.threads} threads, {args.tokens} steps: a step takes {step * 1e3:.2f} ms "
          f"(median of {args.repeats} runs)\n")
    print("| operation | per step | us per step | us each | share of the step |")
    print("|---|---:|---:|---:|---:|")
    for seconds, count, name in rows:
        print(f"| {name} | {count:g} | {seconds * 1e6:.0f} | {seconds / count * 1e6:.2f} | {seconds / step:.1%} |")
    print(f"| all {sum(c for _, c, _ in rows):g} operations | | {total * 1e6:.0f} | | {total / step:.1%} |")
    print(f"| between operations | | {(step - total) * 1e6:.0f} | | {(step - total) / step:.1%} |")


if __name__ == "__main__":
    main()
