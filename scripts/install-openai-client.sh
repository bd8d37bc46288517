#!/usr/bin/env bash
# Install OpenAI's official Python client (openai==3.57.0, from PyPI) into a virtual
# environment for the `nanollm serve` smoke test (`cargo test --release --test serve`):
#   $NANOLLM_CACHE_DIR/openai-venv (default: $XDG_CACHE_HOME/nanollm/openai-venv, else
#   ~/.cache/nanollm/openai-venv)
# Does nothing when it is already there. Needs python3 with venv and pip (about 70 MB).
set -euo pipefail

VERSION="3.57.0"

. "$(dirname "$(readlink -f "$0")")/common.sh"
cache="$(cache_dir)"
venv="$cache/openai-venv"
stamp="$venv/.complete-openai-$VERSION"

# The venv works: its python imports this openai version (a stamp alone vouches for nothing).
works() {
  [ -f "$stamp" ] && "$venv/bin/python" -I -c "import openai; assert openai.__version__ == '$VERSION'" >/dev/null 2>&1
}

if works; then
  echo "openai $VERSION already in $venv" >&2
  exit 0
fi
require_python3 "install OpenAI's Python client from PyPI" "install it with venv and pip (e.g. apt install python3-venv)"
require_writable "$cache"
# One run at a time per cache directory: a second waits, then finds the venv installed.
if lock_cache "$cache" ".openai-venv.lock" && works; then
  echo "openai $VERSION already in $venv" >&2
  exit 0
fi

rm -rf "$venv"
python3 -m venv "$venv"
# `python -m pip`, not the bin/pip launcher: its #!/bin/sh line breaks on a `$` in the path.
PIP_REQUIRE_VIRTUALENV=0 "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "openai==$VERSION"
"$venv/bin/python" -I -c "import openai; assert openai.__version__ == '$VERSION', openai.__version__"
touch "$stamp"
echo "openai $VERSION installed in $venv" >&2
