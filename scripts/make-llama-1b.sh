#!/usr/bin/env bash
# Make random-weight GGUFs of Llama-3.2-1B's shape (hidden 2048, 16 layers, 32 heads / 8 KV
# heads, FFN 8192, vocab 128256, tied embeddings; Llama 3's real tokenizer, copied from
# llama.cpp's ggml-vocab-llama-bpe.gguf), for speed and memory figures at a real 1B shape
# where the K-quant files are real llama-quantize output (Q4_K_M mixes q4_K with q6_K for
# token_embd and half the attn_v/ffn_down; in Q4_0 token_embd, the tied output, is q6_K as
# in every real Q4_0 file), and llama.cpp loads the very same files for side-by-side
# figures. The weights are noise (normal, std 0.02, fixed seed: the F16 file is the same
# bytes on every run), and so is the text they generate. Into
#   $NANOLLM_CACHE_DIR/llama-1b-random/llama-1b-random-{F16,Q4_K_M,Q4_0,Q8_0}.gguf
#   (default: $XDG_CACHE_HOME/nanollm/..., else ~/.cache/nanollm/...)
# The F16 file comes from scripts/make_llama_1b.py (numpy, pinned, in a virtualenv at
# $NANOLLM_CACHE_DIR/llama-1b-venv; gguf-py from vendor/llama.cpp), the others from
# llama-quantize. Run scripts/build-llama-cpp.sh first (it provides both); this runs
# scripts/fetch-llama-vocab.sh when the vocabulary is not in the cache yet.
# Takes ~3 min on 2 cores (F16 40 s, Q4_K_M 90 s, Q4_0 and Q8_0 20 s each, hashing 15 s),
# 2 GB of memory at most, and 5.4 GB of disk (F16 2.5 GB, Q8_0 1.3 GB, Q4_K_M 0.8 GB,
# Q4_0 0.8 GB) plus 100 MB for the virtualenv. The stamp file records each file's size and
# sha256; a rerun with the files present at those sizes does nothing (check the hashes with
#   cd DIR && awk '{print $2 "  " $3}' .complete-llama-1b-random-v1 | sha256sum -c).
set -euo pipefail

# Bump when what the files hold changes (shape, keys, seed, generator): a rerun then remakes them.
RECIPE="v1"
SEED=20240925
NUMPY_VERSION="2.2.6"
PYYAML_VERSION="6.0.2"
TYPES="Q4_K_M Q4_0 Q8_0"
# Free disk needed in the cache directory before starting, in KiB (the files total 5.4 GB).
NEED_KB=$((6 * 1024 * 1024))

. "$(dirname "$(readlink -f "$0")")/common.sh"
root="$(cd "$scripts_dir/.." && pwd)"
gguf_py="$root/vendor/llama.cpp/gguf-py"
quantize="$root/vendor/llama.cpp/build/bin/llama-quantize"
cache="$(cache_dir)"
dir="$cache/llama-1b-random"
stamp="$dir/.complete-llama-1b-random-$RECIPE"
venv="$cache/llama-1b-venv"
venv_stamp="$venv/.complete-numpy-$NUMPY_VERSION-pyyaml-$PYYAML_VERSION"
vocab="$cache/llama-vocab/ggml-vocab-llama-bpe.gguf"

fail() {
  echo "error: $*" >&2
  exit 1
}

# The stamp lists 4 files ("SIZE SHA256 NAME" lines), each present at its size.
made() {
  local size sha name
  [ -f "$stamp" ] && [ "$(wc -l <"$stamp")" = 4 ] || return 1
  while read -r size sha name; do
    [ -f "$dir/$name" ] && [ "$(stat -c %s "$dir/$name")" = "$size" ] || return 1
  done <"$stamp"
}

if made; then
  echo "Llama-3.2-1B-shaped random GGUFs already in $dir" >&2
  exit 0
fi
require_writable "$cache"
# One run at a time per cache directory (a second waits, then finds the files made); under
# the lock, remove the temporary directories a killed run left behind.
if lock_cache "$cache" ".llama-1b-random.lock"; then
  if made; then
    echo "Llama-3.2-1B-shaped random GGUFs already in $dir" >&2
    exit 0
  fi
  remove_stale "$cache" ".llama-1b-tmp."
fi
if [ -e "$dir" ] && [ ! -d "$dir" ]; then
  fail "$dir is not a directory: move it away, then run this again"
fi

[ -f "$gguf_py/gguf/__init__.py" ] || fail "no gguf-py in $gguf_py: run scripts/build-llama-cpp.sh first"
[ -x "$quantize" ] || fail "no $quantize: run scripts/build-llama-cpp.sh first"
require_python3 "make the F16 file (with numpy)" "install it with venv and pip (e.g. apt install python3-venv)"
free_kb="$(df -Pk "$cache" | awk 'NR == 2 { print $4 }')"
if [ -n "$free_kb" ] && [ "$free_kb" -lt "$NEED_KB" ]; then
  fail "$cache has $((free_kb / 1024)) MiB free; these files need about 6 GiB"
fi

if [ ! -f "$vocab" ]; then
  # It prints its own error line when it fails.
  "$scripts_dir/fetch-llama-vocab.sh" || exit 1
  [ -f "$vocab" ] || fail "scripts/fetch-llama-vocab.sh did not install $vocab"
fi

# numpy (and PyYAML, which gguf-py imports) in a virtualenv, not the system python.
venv_works() {
  [ -f "$venv_stamp" ] && "$venv/bin/python" -I -c "import numpy, yaml; assert numpy.__version__ == '$NUMPY_VERSION'" >/dev/null 2>&1
}
if ! venv_works; then
  echo "installing numpy $NUMPY_VERSION into $venv ..." >&2
  rm -rf "$venv"
  python3 -m venv "$venv" || fail "python3 -m venv $venv failed (python3 needs venv: e.g. apt install python3-venv)"
  # `python -m pip`, not the bin/pip launcher: its #!/bin/sh line breaks on a `$` in the path.
  PIP_REQUIRE_VIRTUALENV=0 "$venv/bin/python" -m pip install --quiet --disable-pip-version-check \
    "numpy==$NUMPY_VERSION" "PyYAML==$PYYAML_VERSION" || fail "pip could not install numpy $NUMPY_VERSION into $venv (its message is above)"
  touch "$venv_stamp"
  venv_works || fail "numpy $NUMPY_VERSION does not import in $venv"
fi

tmp=$(mktemp -d "$cache/.llama-1b-tmp.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
started=$SECONDS

f16="$tmp/llama-1b-random-F16.gguf"
echo "writing $(basename "$f16") (random weights, seed $SEED) ..." >&2
rc=0
PYTHONPATH="$gguf_py" "$venv/bin/python" -s "$scripts_dir/make_llama_1b.py" --vocab "$vocab" --out "$f16" --seed "$SEED" || rc=$?
# Status 3: the helper printed its own error line.
[ "$rc" = 3 ] && exit 1
[ "$rc" = 0 ] || fail "scripts/make_llama_1b.py failed (status $rc) writing the F16 file: its message is above"

for type in $TYPES; do
  out="$tmp/llama-1b-random-$type.gguf"
  echo "quantizing to $type with llama-quantize ..." >&2
  t0=$SECONDS
  if ! "$quantize" "$f16" "$out" "$type" "$(nproc)" >"$tmp/quantize-$type.log" 2>&1; then
    tail -n 15 "$tmp/quantize-$type.log" >&2
    fail "llama-quantize could not make $type (the end of its log is above)"
  fi
  echo "  $(basename "$out"): $(stat -c %s "$out") bytes in $((SECONDS - t0)) s" >&2
done

manifest="$tmp/stamp"
for type in F16 $TYPES; do
  name="llama-1b-random-$type.gguf"
  echo "$(stat -c %s "$tmp/$name") $(sha256sum "$tmp/$name" | cut -d' ' -f1) $name"
done >"$manifest" || fail "could not hash the files in $tmp"
mkdir -p "$dir" || fail "cannot create $dir"
rm -f "$dir"/.complete-llama-1b-random-*
for type in F16 $TYPES; do
  mv -f "$tmp/llama-1b-random-$type.gguf" "$dir/" || fail "cannot move the files into $dir"
done
chmod 644 "$manifest" && mv "$manifest" "$stamp" || fail "cannot write the stamp $stamp"
echo "made 4 Llama-3.2-1B-shaped random GGUFs in $dir in $((SECONDS - started)) s" >&2
