#!/usr/bin/env bash
# "Nothing slower" between two commits on this CPU, in one command:
#   scripts/bench-ab-revisions.sh [options] OLD_REV [NEW_REV]
# Builds each commit (NEW_REV defaults to HEAD) in a clone of its own under DIR (attn-bench and attn-generate,
# Release, Debian lane; a clone already there is reused and rebuilt incrementally), then alternates the two builds
# with scripts/bench-ab.sh in both orders: the peer suite's core, training and MultiHeadAttention rows, then the
# decode suite's decode and linear_rows rows. With --model, attn-generate's prefill and decode speed too, the
# builds alternated six times per dtype. Prints one table per suite (new/old in each order and their geometric
# mean) and names the rows slower in both orders: time those alone before calling them slower, since a 2-core
# guest moves a row by several percent with nothing changed (bench/RESULTS.md). Progress goes to stderr; the raw
# outputs stay in DIR/report-OLD-NEW/. Run it with nothing else on the machine: a full run takes an hour or more.
# Options:
#   --dir DIR            where the clones and reports go (default /tmp/attn-ab)
#   --rounds N           rounds of each bench-ab.sh run (default 4 for the peer suite, 3 for decode)
#   --model DIR          a model directory for attn-generate (docs/generate.md); without it, no generate rows
#   --peer-filter F      a peer-suite filter instead of the defaults (repeatable)
#   --decode-filter F    a decode-suite filter instead of the defaults (repeatable)
#   --no-decode          leave the decode suite out
set -euo pipefail
shopt -s inherit_errexit  # a failure inside $(...) stops the script too

usage() { sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'; }
die() { echo "bench-ab-revisions: $*" >&2; exit 2; }
value() { [ $# -ge 2 ] && [ -n "$2" ] || die "$1 needs a value (--help lists the options)"; }

dir=/tmp/attn-ab rounds= model= decode=1
peer_filters=() decode_filters=() revs=()
while [ $# -gt 0 ]; do
  case $1 in
    -h|--help) usage; exit 0 ;;
    --dir) value "$@"; dir=$2; shift 2 ;;
    --rounds) value "$@"; rounds=$2; shift 2
              [[ $rounds =~ ^[1-9][0-9]*$ ]] || die "--rounds: expected a positive whole number, got '$rounds'" ;;
    --model) value "$@"; model=$2; shift 2
             [ -f "$model/config.json" ] || die "--model: no config.json in '$model' (docs/generate.md says how to make one)" ;;
    --peer-filter) value "$@"; peer_filters+=("$2"); shift 2 ;;
    --decode-filter) value "$@"; decode_filters+=("$2"); shift 2 ;;
    --no-decode) decode=; shift ;;
    -*) die "unknown option '$1' (--help lists them)" ;;
    *) revs+=("$1"); shift ;;
  esac
done
[ ${#revs[@]} -ge 1 ] && [ ${#revs[@]} -le 2 ] || { usage >&2; exit 2; }
[ ${#peer_filters[@]} -gt 0 ] ||
  peer_filters=("core/fused/T=1024" "core/fused/T=2048" "train/fused/T=1024" "train/fused/T=2048" "mha/attn_mha/T=1024")
[ ${#decode_filters[@]} -gt 0 ] ||
  decode_filters=("decode/decode/B=8/Hkv=8/L=8192/bfloat16" "decode/decode/B=1/Hkv=8/L=32768"
                  "linear/attn_linear/rows=1/" "linear/attn_linear/rows=4/49152")

scripts=$(cd "$(dirname "$0")" && pwd)
root=$(git -C "$scripts" rev-parse --show-toplevel)
for tool in cmake ninja; do
  command -v $tool >/dev/null || die "$tool is missing: run 'make deps' first"
done
old=$(git -C "$root" rev-parse --verify --quiet "${revs[0]}^{commit}") || die "OLD_REV '${revs[0]}' is not a commit here"
new=$(git -C "$root" rev-parse --verify --quiet "${revs[1]:-HEAD}^{commit}") ||
  die "NEW_REV '${revs[1]:-HEAD}' is not a commit here"
[ "$old" != "$new" ] || die "OLD_REV and NEW_REV are the same commit ($old)"
# Both builds run with the same OpenBLAS kernel set, the one `make` would choose here.
if [ -z "${OPENBLAS_CORETYPE+set}" ]; then
  coretype=$(bash "$scripts/openblas-coretype.sh")
  [ -z "$coretype" ] || export OPENBLAS_CORETYPE=$coretype
fi

say() { echo "bench-ab-revisions: $(date +%H:%M:%S) $*" >&2; }
mkdir -p "$dir"
report=$dir/report-${old:0:7}-${new:0:7}
mkdir -p "$report"

# A clone of this repository at `sha`, built; prints its build directory.
build_at() {
  local sha=$1 clone=$dir/${1:0:12}
  if [ ! -e "$clone" ]; then
    say "cloning ${sha:0:7} into $clone"
    git clone -q --no-checkout "$root" "$clone" || die "cannot clone $root into $clone"
  fi
  # Only a clone of our own at the top of that folder: git -C would otherwise act on a repository around it.
  [ "$(git -C "$clone" rev-parse --show-toplevel 2>/dev/null)" = "$(cd "$clone" && pwd -P)" ] ||
    die "$clone is there but is not a clone this script made: remove it or pick another --dir"
  # A clone from an earlier run may predate the commit: bring this repository's branches and HEAD first.
  git -C "$clone" cat-file -e "$sha^{commit}" 2>/dev/null ||
    git -C "$clone" fetch -q "$root" HEAD '+refs/heads/*:refs/remotes/origin/*' ||
    die "$clone cannot fetch from $root"
  git -C "$clone" -c advice.detachedHead=false checkout -q --detach "$sha" ||
    die "$clone cannot check out ${sha:0:7}: remove it and run again"
  [ -z "$(git -C "$clone" status --porcelain --untracked-files=no)" ] ||
    die "$clone has local changes: remove it and run again"
  local log=$report/build-${sha:0:7}.log targets=(attn-bench)
  [ -z "$model" ] || targets+=(attn-generate)
  say "building ${sha:0:7} (${targets[*]}, Release; log: $log)"
  if ! { cmake -S "$clone" -B "$clone/build" -G Ninja -DCMAKE_BUILD_TYPE=Release &&
         cmake --build "$clone/build" -j "$(nproc)" --target "${targets[@]}"; } >"$log" 2>&1; then
    tail -n 20 "$log" >&2
    die "building ${sha:0:7} failed (whole log: $log)"
  fi
  echo "$clone/build"
}
old_build=$(build_at "$old")
new_build=$(build_at "$new")
old_bench=$old_build/apps/bench/attn-bench new_bench=$new_build/apps/bench/attn-bench

# bench-ab.sh's tables from both orders as one: new/old in each order, their geometric mean, and a mark on the
# rows of attn's slower in both.
combine() {
  awk '
    FNR == 1 { file++ }
    $1 ~ /\// {
      names[$1] = 1
      if ($4 !~ /^[0-9.]+$/) next  # a row one build lacks: "-"
      if (file == 1) { first[$1] = $4; o1[$1] = $2; n1[$1] = $3 }
      else if ($4 + 0 > 0) { second[$1] = 1 / $4; o2[$1] = $3; n2[$1] = $2 }
    }
    END {
      printf "%-44s %27s %27s %9s\n", "configuration", "old first: ms (new/old)", "new first: ms (new/old)", "geo mean"
      count = 0; missing = ""
      for (n in names) {
        if ((n in first) && (n in second)) rows[++count] = n
        else missing = missing " " n
      }
      for (i = 2; i <= count; i++) for (j = i; j > 1 && rows[j-1] > rows[j]; j--) { t = rows[j]; rows[j] = rows[j-1]; rows[j-1] = t }
      for (i = 1; i <= count; i++) {
        n = rows[i]
        g = sqrt(first[n] * second[n])
        if (n ~ /^(gemm|bandwidth)\//) { mark = "  (a ceiling: no code of attn)"; ceilings++ }
        else if (first[n] > 1 && second[n] > 1) { mark = "  slower in both orders"; slower++ }
        else mark = ""
        printf "%-44s %27s %27s %9.3f%s\n", n, sprintf("%.2f -> %.2f (%.3f)", o1[n], n1[n], first[n]),
               sprintf("%.2f -> %.2f (%.3f)", o2[n], n2[n], second[n]), g, mark
      }
      printf "\n%d row(s) slower in both orders%s\n", slower, slower ? ": time them alone (attn-bench --filter ROW, the builds alternated)" : ""
      if (missing != "") printf "not in both builds and both orders (left out):%s\n", missing
      if (ceilings) printf "The ceilings run LibTorch alone: how far this machine moves with nothing of attn changed (the GEMM output is held across reps from bd1c3c9 on; against an older commit that row reads that change too).\n"
    }' "$1" "$2"
}

run_suite() {
  local suite=$1 n=$2; shift 2
  say "$suite suite, old first ($n rounds)"
  SUITE=$suite "$scripts/bench-ab.sh" "$old_bench" "$new_bench" "$n" "$@" >"$report/$suite-old-first.txt" ||
    die "the $suite suite's run failed (bench-ab.sh said why above)"
  say "$suite suite, new first ($n rounds)"
  SUITE=$suite "$scripts/bench-ab.sh" "$new_bench" "$old_bench" "$n" "$@" >"$report/$suite-new-first.txt" ||
    die "the $suite suite's run failed (bench-ab.sh said why above)"
  combine "$report/$suite-old-first.txt" "$report/$suite-new-first.txt" >"$report/$suite.txt"
}

run_suite peer "${rounds:-4}" "${peer_filters[@]}"
[ -z "$decode" ] || run_suite decode "${rounds:-3}" "${decode_filters[@]}"

if [ -n "$model" ]; then
  prompt=$root/tests/reference/long_prompt.txt
  : >"$report/generate-raw.txt"
  for dtype in bfloat16 float32; do
    for i in 1 2 3 4 5 6; do
      say "attn-generate $dtype, alternation $i/6"
      order="old new"; [ $((i % 2)) = 1 ] || order="new old"
      for which in $order; do
        build=${which}_build
        log=$report/generate-$which-$dtype-$i.log
        "${!build}/apps/generate/attn-generate" --model "$model" --raw --prompt-file "$prompt" --max-new-tokens 128 \
          --ignore-eos --dtype "$dtype" >/dev/null 2>"$log" || die "attn-generate ($which, $dtype) failed: see $log"
        grep 'prefill' "$log" | sed "s/^/$which $dtype $i /" >>"$report/generate-raw.txt" ||
          die "attn-generate ($which, $dtype) printed no speeds: see $log"
      done
    done
  done
  # Lines: which dtype i "attn-generate: prefill N tokens in S s (X tokens/s); decode ... (Y tokens/s); ..."
  awk '
    { match($0, /\(([0-9.]+) tokens\/s\); decode/); pre = substr($0, RSTART + 1, RLENGTH - 1) + 0
      match($0, /decode .*\(([0-9.]+) tokens\/s\)/); s = substr($0, RSTART, RLENGTH); sub(/.*\(/, "", s); dec = s + 0
      p[$2, $3, $1] = pre; d[$2, $3, $1] = dec; if ($3 > rounds) rounds = $3 }
    function median(a, n,   i, j, t) {
      for (i = 2; i <= n; i++) for (j = i; j > 1 && a[j-1] > a[j]; j--) { t = a[j]; a[j] = a[j-1]; a[j-1] = t }
      return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
    }
    END {
      printf "%-10s %-8s %10s %10s %18s\n", "dtype", "phase", "old tok/s", "new tok/s", "new/old (paired)"
      split("bfloat16 float32", order, " ")
      for (k = 1; k <= 2; k++) {
        t = order[k]
        split("", po); split("", pn); split("", pr); split("", dn); split("", dd); split("", dr)
        for (i = 1; i <= rounds; i++) {
          po[i] = p[t, i, "old"]; pn[i] = p[t, i, "new"]; pr[i] = pn[i] / po[i]
          dd[i] = d[t, i, "old"]; dn[i] = d[t, i, "new"]; dr[i] = dn[i] / dd[i]
        }
        printf "%-10s %-8s %10.1f %10.1f %18.3f\n", t, "prefill", median(po, rounds), median(pn, rounds), median(pr, rounds)
        printf "%-10s %-8s %10.1f %10.1f %18.3f\n", t, "decode", median(dd, rounds), median(dn, rounds), median(dr, rounds)
      }
    }' "$report/generate-raw.txt" >"$report/generate.txt"
fi

cpu=$(lscpu | sed -n 's/^Model name: *//p' | head -1)
family=$(lscpu | sed -n 's/^CPU family: *//p' | head -1) model_id=$(lscpu | sed -n 's/^Model: *//p' | head -1)
{
  echo "old ${old:0:7}, new ${new:0:7}; CPU: $cpu (family $family model $model_id), $(nproc) cores" \
       "${OPENBLAS_CORETYPE:+(OPENBLAS_CORETYPE=$OPENBLAS_CORETYPE)}"
  echo; echo "== peer suite (medians of each order's rounds, ms)"; cat "$report/peer.txt"
  [ -z "$decode" ] || { echo; echo "== decode suite"; cat "$report/decode.txt"; }
  [ -z "$model" ] || { echo; echo "== attn-generate ($(basename "$model"), medians of six alternations; tokens/s, so above 1 is faster)"
                       cat "$report/generate.txt"; }
} | tee "$report/summary.txt"
say "done; everything is in $report"
