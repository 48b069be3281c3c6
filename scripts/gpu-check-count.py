#!/usr/bin/env python3
"""Counts the GoogleTest cases in a CTest log (Testing/Temporary/LastTest.log), the CUDA cases apart.

scripts/gpu-check.sh runs it after ctest. CTest runs one test per GoogleTest suite and one more per suite for its
CUDA cases (SUITE.cuda, cmake/gtest_suites_discover.cmake), so a passing CTest line says nothing of how many
cases ran or skipped inside it. This reads each case's own line ([       OK ], [  SKIPPED ], [  FAILED  ]).

With --require-gpu 1, the run fails unless at least one CUDA case ran and none was skipped or failed.
Standard library only: the GPU machine's Python has nothing else that this needs.
"""
import argparse
import json
import re
import sys

CASE = re.compile(r"^\[ +(OK|SKIPPED|FAILED) +\] (\S+) \(\d+ ms\)")


def parse(log_text):
    """{ctest test name: {"OK": [...], "SKIPPED": [...], "FAILED": [...]}} from a LastTest.log."""
    tests, current = {}, None
    for line in log_text.splitlines():
        m = re.match(r'^\d+/\d+ Test: (.+)$', line)
        if m:
            current = tests.setdefault(m.group(1).strip(), {"OK": [], "SKIPPED": [], "FAILED": [], "ctest": ""})
            continue
        if current is None:
            continue
        m = CASE.match(line)
        if m:
            current[m.group(1)].append(m.group(2))
            continue
        # CTest's verdict on the whole process: a crash leaves no case line behind ("Test Failed." follows a
        # signal as much as a failed case).
        if line.startswith("Test Passed."):
            current["ctest"] = "passed"
        elif line.startswith("Test Failed") or line.startswith("Test Not Run") or line.startswith("Test Skipped"):
            current["ctest"] = line.strip().rstrip(".")
    return tests


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("log", help="CTest's Testing/Temporary/LastTest.log")
    parser.add_argument("--require-gpu", type=int, default=0, help="1: fail unless CUDA cases ran, none skipped")
    parser.add_argument("--json", help="write the counts and the CUDA cases' names here")
    args = parser.parse_args()
    with open(args.log, encoding="utf-8", errors="replace") as f:
        tests = parse(f.read())
    if not tests:
        print(f"gpu-check-count: no tests in {args.log}", file=sys.stderr)
        return 1

    def total(names, kind):
        return sum(len(tests[n][kind]) for n in names)

    cuda = sorted(n for n in tests if n.endswith(".cuda"))
    rest = sorted(n for n in tests if not n.endswith(".cuda"))
    counts = {
        "cuda": {k: total(cuda, k) for k in ("OK", "SKIPPED", "FAILED")},
        "other": {k: total(rest, k) for k in ("OK", "SKIPPED", "FAILED")},
        "ctest_tests": len(tests),
        "cuda_suites": len(cuda),
        "cuda_cases": {n: tests[n] for n in cuda},
    }
    # CUDA tests whose process CTest failed although no case line says so: a crash (signal) or an exit code.
    crashed = sorted(n for n in cuda if tests[n]["ctest"] not in ("passed", "") and not tests[n]["FAILED"])
    counts["cuda_processes_failed"] = crashed
    c, o = counts["cuda"], counts["other"]
    lines = [
        f"GoogleTest cases, CUDA: {c['OK']} passed, {c['FAILED']} failed, {c['SKIPPED']} skipped "
        f"(in {len(cuda)} CUDA suites)",
        f"GoogleTest cases, the rest: {o['OK']} passed, {o['FAILED']} failed, {o['SKIPPED']} skipped "
        f"({len(tests)} CTest tests in all)",
    ]
    for n in cuda:
        for case in tests[n]["FAILED"]:
            lines.append(f"  CUDA case FAILED: {case}")
    for n in crashed:
        lines.append(f"  CUDA test {n}: {tests[n]['ctest']} with no failed case reported (a crash?)")
    print("\n".join(lines))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(counts, f, indent=1)
        with open(args.json.rsplit(".", 1)[0] + ".txt", "w", encoding="utf-8") as f:
            f.write("\n".join(lines) + "\n")
    if args.require_gpu:
        if c["OK"] == 0:
            print("gpu-check-count: a GPU is present but no CUDA case passed", file=sys.stderr)
            return 1
        if c["SKIPPED"] or c["FAILED"] or crashed:
            print("gpu-check-count: on a GPU every CUDA case must run and pass", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
