#!/usr/bin/env bash
# Build llama.cpp's command-line tools from the llama-cpp-python==0.3.36 sdist (it vendors
# llama.cpp), for side-by-side figures and for making K-quant test files:
#   llama-bench, llama-batched-bench, llama-server, llama-quantize, llama-perplexity,
#   llama-tokenize, llama-cli, llama-lookup and llama-speculative-simple (speculative decoding)
# into vendor/llama.cpp/build/bin (vendor/ is ignored by git). cmake and ninja come from pip
# (a virtualenv in vendor/build-tools); -DGGML_NATIVE=ON builds for this machine's CPU.
# Takes ~15 min on 2 cores. Not needed by the tests or CI.
# LLAMA_CPP_PYTHON_SDIST=FILE uses a copy of the sdist already on disk (still checked).
set -euo pipefail

VERSION="0.3.36"
SDIST="llama_cpp_python-$VERSION.tar.gz"
SDIST_SHA256="832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e"
TOOLS="llama-bench llama-batched-bench llama-server llama-quantize llama-perplexity llama-tokenize llama-cli llama-lookup llama-speculative-simple"

. "$(dirname "$(readlink -f "$0")")/common.sh"
root="$(cd "$scripts_dir/.." && pwd)"
vendor="$root/vendor"
src="$vendor/llama.cpp"
stamp="$src/.from-llama-cpp-python-$VERSION"
mkdir -p "$vendor"

if [ ! -f "$stamp" ]; then
  require_python3 "download the llama-cpp-python sdist from PyPI" "install it, or set LLAMA_CPP_PYTHON_SDIST to a copy on disk"
  tmp=$(mktemp -d "$vendor/.sdist.XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
  if [ -n "${LLAMA_CPP_PYTHON_SDIST:-}" ]; then
    cp -- "$LLAMA_CPP_PYTHON_SDIST" "$tmp/$SDIST"
  else
    echo "downloading the llama-cpp-python==$VERSION sdist from PyPI (about 77 MB) ..." >&2
    pip_download "llama-cpp-python==$VERSION" "$tmp" --no-binary llama-cpp-python
  fi
  if [ "$(sha256sum "$tmp/$SDIST" | cut -d' ' -f1)" != "$SDIST_SHA256" ]; then
    echo "error: $SDIST: sha256 mismatch (expected $SDIST_SHA256)" >&2
    exit 1
  fi
  tar -xzf "$tmp/$SDIST" -C "$tmp" "llama_cpp_python-$VERSION/vendor/llama.cpp"
  rm -rf "$src"
  mv "$tmp/llama_cpp_python-$VERSION/vendor/llama.cpp" "$src"
  touch "$stamp"
fi

tools="$vendor/build-tools"
if [ ! -x "$tools/bin/cmake" ] || [ ! -x "$tools/bin/ninja" ]; then
  require_python3 "install cmake and ninja from PyPI" "install it"
  python3 -m venv "$tools"
  "$tools/bin/pip" install --quiet cmake ninja
fi
export PATH="$tools/bin:$PATH"

# -march=native turns on AMX where the CPU reports it; on this project's KVM Xeon (which
# reports amx_tile/amx_int8) ggml's AMX matmul then dies at its first `ldtilecfg`, so AMX
# is left out (every other native feature stays: AVX-512, VNNI, ...). nanollm does not use AMX.
no_amx="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
cmake -S "$src" -B "$src/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON \
  -DCMAKE_C_FLAGS="$no_amx" -DCMAKE_CXX_FLAGS="$no_amx" \
  -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=ON -DLLAMA_BUILD_SERVER=ON >&2
# shellcheck disable=SC2086
cmake --build "$src/build" -j "$(nproc)" --target $TOOLS >&2
for t in $TOOLS; do
  [ -x "$src/build/bin/$t" ] || { echo "error: $src/build/bin/$t was not built" >&2; exit 1; }
done
echo "llama.cpp tools in $src/build/bin" >&2
