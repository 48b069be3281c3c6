#!/usr/bin/env bash
# Compares two attn-bench builds on this machine, alternating them so that drift and noise hit both alike:
#   scripts/bench-ab.sh OLD_ATTN_BENCH NEW_ATTN_BENCH [ROUNDS] [FILTER...]
# For ROUNDS rounds (default 3), runs old then new with `--suite quick --filter F` for each FILTER (default: the
# fused core and training rows at T=2048, fused T=4096, attn's and LibTorch's MultiHeadAttention at T=1024),
# then prints per configuration the median of each build's runs and new/old. Progress goes to stderr.
# SUITE=peer (or decode, full, ...) runs the filters against that suite instead of quick.
set -euo pipefail
if [ $# -lt 2 ]; then sed -n '2,7p' "$0" >&2; exit 2; fi
old=$1 new=$2 rounds=${3:-3}
shift $(( $# >= 3 ? 3 : 2 ))
filters=("$@")
[ ${#filters[@]} -gt 0 ] || filters=("fused/T=2048" "fused/T=4096/noncausal" "mha/attn_mha/T=1024" "mha/torch_mha/T=1024")
results=$(mktemp) errors=$(mktemp)
trap 'rm -f "$results" "$errors"' EXIT
for round in $(seq "$rounds"); do
  for which in old new; do
    echo "bench-ab: round $round/$rounds, $which" >&2
    for f in "${filters[@]}"; do
      if ! "${!which}" --suite "${SUITE:-quick}" --filter "$f" 2>"$errors" |
           awk -v w="$which" '$1 ~ /\// && $2 ~ /^[0-9.]+$/ {print w, $1, $2}' >>"$results"; then
        tail -n 5 "$errors" >&2
        echo "bench-ab: ${!which} --suite ${SUITE:-quick} --filter $f failed (its last lines above)" >&2
        exit 1
      fi
    done
  done
done
awk '
  { ms[$2, $1] = ms[$2, $1] " " $3; names[$2] = 1 }
  function median(list,   a, n, i, j, t) {
    n = split(list, a, " ")
    for (i = 2; i <= n; i++) for (j = i; j > 1 && a[j-1] + 0 > a[j] + 0; j--) { t = a[j]; a[j] = a[j-1]; a[j-1] = t }
    return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
  }
  END {
    printf "%-34s %10s %10s %8s\n", "configuration", "old ms", "new ms", "new/old"
    for (n in names) {  # a configuration that only one build has (a new row, a renamed one) shows "-" for the other
      o = (n, "old") in ms ? median(ms[n, "old"]) : ""; w = (n, "new") in ms ? median(ms[n, "new"]) : ""
      printf "%-34s %10s %10s %8s\n", n, o == "" ? "-" : sprintf("%.2f", o), w == "" ? "-" : sprintf("%.2f", w),
             o == "" || w == "" || o + 0 == 0 ? "-" : sprintf("%.3f", w / o)
    }
  }' "$results" | sort
