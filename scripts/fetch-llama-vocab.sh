#!/usr/bin/env bash
# Fetch llama.cpp's tokenizer test vocabularies (models/ggml-vocab-*.gguf with their .inp/.out
# reference strings and ids) for `cargo test --test tokenizer_vocab`, from the PyPI sdist
# llama-cpp-python==0.3.36 (it vendors llama.cpp; MIT licence, copied beside the files), into
#   $NANOLLM_CACHE_DIR/llama-vocab (default: $XDG_CACHE_HOME/nanollm/llama-vocab, else
#   ~/.cache/nanollm/llama-vocab)
# Checks the sdist's sha256, and records each file's sha256 in the stamp file; a rerun checks
# them and fetches again when one is missing or changed (else does nothing).
# LLAMA_CPP_PYTHON_SDIST=FILE uses a copy of the sdist already on disk (still checked).
set -euo pipefail

VERSION="0.3.36"
SDIST="llama_cpp_python-$VERSION.tar.gz"
SDIST_SHA256="832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e"
MODELS="llama_cpp_python-$VERSION/vendor/llama.cpp/models"
LICENSE="llama_cpp_python-$VERSION/vendor/llama.cpp/LICENSE"
# Files the stamp lists: the sdist's 49 ggml-vocab-* files and the licence.
FILES=50

. "$(dirname "$(readlink -f "$0")")/common.sh"
# Absolute (cache_dir), so the stamp's path still holds inside `cd "$dir"` below.
cache="$(cache_dir)"
dir="$cache/llama-vocab"
stamp="$dir/.complete-llama-cpp-python-$VERSION"

# One run at a time per cache directory (a second waits, then finds the files installed);
# under the lock, remove the temporary entries a killed run left behind.
if mkdir -p "$cache" 2>/dev/null && [ -w "$cache" ] && lock_cache "$cache" ".llama-vocab.lock"; then
  remove_stale "$cache" ".vocab."
  if [ -d "$dir" ]; then
    remove_stale "$dir" ".stamp."
  fi
fi

if [ -e "$dir" ] && [ ! -d "$dir" ]; then
  echo "error: $dir is not a directory: move it away, then run this again" >&2
  exit 1
fi
if [ -e "$stamp" ] && [ ! -f "$stamp" ]; then
  echo "error: $stamp is not a file: remove it, then run this again" >&2
  exit 1
fi
if [ -f "$stamp" ]; then
  # An empty stamp (from before the manifest) or a short one vouches for nothing: fetch again.
  if [ "$(wc -l <"$stamp")" = "$FILES" ] && (cd "$dir" && sha256sum --quiet --strict -c "$stamp" >/dev/null 2>&1); then
    echo "llama.cpp vocab fixtures already in $dir" >&2
    exit 0
  fi
  echo "llama.cpp vocab fixtures in $dir are missing or changed: fetching them again" >&2
  require_writable "$dir"
  rm -f "$stamp"
fi

sha() { sha256sum "$1" | cut -d' ' -f1; }

if [ -n "${LLAMA_CPP_PYTHON_SDIST:-}" ]; then
  if [ ! -f "$LLAMA_CPP_PYTHON_SDIST" ] || [ ! -r "$LLAMA_CPP_PYTHON_SDIST" ]; then
    echo "error: LLAMA_CPP_PYTHON_SDIST=$LLAMA_CPP_PYTHON_SDIST is not a readable file from $PWD (it should be $SDIST)" >&2
    exit 1
  fi
else
  require_python3 "download the llama-cpp-python sdist from PyPI" "install it, or set LLAMA_CPP_PYTHON_SDIST to a copy on disk"
fi
require_writable "$cache"
tmp=$(mktemp -d "$cache/.vocab.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

if [ -n "${LLAMA_CPP_PYTHON_SDIST:-}" ]; then
  cp -- "$LLAMA_CPP_PYTHON_SDIST" "$tmp/$SDIST"
else
  echo "downloading the llama-cpp-python==$VERSION sdist from PyPI (about 77 MB) ..." >&2
  pip_download "llama-cpp-python==$VERSION" "$tmp" --no-binary llama-cpp-python
fi
if [ "$(sha "$tmp/$SDIST")" != "$SDIST_SHA256" ]; then
  echo "error: $SDIST${LLAMA_CPP_PYTHON_SDIST:+ (LLAMA_CPP_PYTHON_SDIST=$LLAMA_CPP_PYTHON_SDIST)}: sha256 mismatch (expected $SDIST_SHA256)" >&2
  exit 1
fi
tar -xzf "$tmp/$SDIST" -C "$tmp" --wildcards "$MODELS/ggml-vocab-*" "$LICENSE"
mkdir -p "$dir"
cp "$tmp/$MODELS"/ggml-vocab-* "$dir/"
cp "$tmp/$LICENSE" "$dir/LICENSE-llama.cpp"
manifest=$(mktemp "$dir/.stamp.XXXXXX")
(cd "$dir" && sha256sum ggml-vocab-* LICENSE-llama.cpp > "$manifest" && chmod 644 "$manifest" && mv "$manifest" "$stamp")
if [ "$(wc -l <"$stamp")" != "$FILES" ]; then
  echo "error: $dir holds $(wc -l <"$stamp") vocab files and licence, expected $FILES: remove stray ggml-vocab-* files, then run this again" >&2
  rm -f "$stamp"
  exit 1
fi
echo "installed $(ls "$tmp/$MODELS" | wc -l) llama.cpp vocab files in $dir" >&2
