#!/usr/bin/env bash
# Installs, from Debian's packages, whatever attn's build, tests and demo need and is missing.
# Runs apt as root, or through sudo. Called by `make demo` and `make test`; extra package names given as
# arguments are installed the same way (scripts/sanitize-and-fuzz.sh adds clang's).
set -euo pipefail

packages=(
  cmake ninja-build g++ make  # build tools
  libtorch-dev                # LibTorch (1.13 on Debian 12)
  libopenblas0-openmp         # without it libtorch runs on reference BLAS, ~45x slower matrix products
  libsleef-dev                # sleef.h: the AVX2/AVX-512 variants of the fused kernel call SLEEF's exp
  nlohmann-json3-dev          # the safetensors header parser, tokenizer.json and config.json
  libpcre2-dev                # PCRE2 (Unicode properties): the byte-level BPE tokenizer's pre-tokenization regex
  libutf8proc-dev             # utf8proc (NFD, categories, case mapping): the WordPiece tokenizer's BERT normalizer
  libfmt-dev libgtest-dev     # apps, tests
  libcli11-dev                # CLI11 (header-only): the apps' command-line parsing
  libgloo-dev                 # Gloo's headers, for c10d's ProcessGroupGloo (LibTorch holds its symbols): context parallelism
  python3-torch               # /usr/bin/python3 computes the tests' reference outputs
  "$@"                        # the caller's extra packages
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" -eq 0 ]; then
    sudo=()
  elif command -v sudo >/dev/null 2>&1; then
    sudo=(sudo)
  else
    echo "attn: these packages are missing and installing them needs root or sudo: ${missing[*]}" >&2
    exit 1
  fi
  case " ${missing[*]} " in
    *" libtorch-dev "*) echo "attn: installing ${missing[*]} (about 400 MB from Debian on a fresh system; a minute or more)" ;;
    *) echo "attn: installing ${missing[*]} from Debian" ;;
  esac
  "${sudo[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# libtorch links libblas.so.3, whichever implementation the alternatives system selects.
blas=$(readlink -f /usr/lib/x86_64-linux-gnu/libblas.so.3 2>/dev/null || true)
case "$blas" in
  *openblas*) ;;
  *) echo "attn: warning: libblas.so.3 is $blas, not OpenBLAS; matrix products will be slow." \
          "Select it with: update-alternatives --config libblas.so.3-x86_64-linux-gnu" >&2 ;;
esac
