#!/usr/bin/env bash
# Install OpenAI's official Python client (openai==3.57.0, from PyPI) into a virtual
# environment for the `nanollm serve` smoke test (`cargo test --release --test serve`):
#   $NANOLLM_CACHE_DIR/openai-venv (default: $XDG_CACHE_HOME/nanollm/openai-venv, else
#   ~/.cache/nanollm/openai-venv)
# Does nothing when it is already there. Needs python3 with venv and pip (about 70 MB).
set -euo pipefail

VERSION="3.57.0"

cache="$("$(dirname "$0")/cache-dir.sh")"
venv="$cache/openai-venv"
stamp="$venv/.complete-openai-$VERSION"

if [ -f "$stamp" ]; then
  echo "openai $VERSION already in $venv" >&2
  exit 0
fi

mkdir -p "$cache"
rm -rf "$venv"
python3 -m venv "$venv"
"$venv/bin/pip" install --quiet --disable-pip-version-check "openai==$VERSION"
"$venv/bin/python" -c "import openai; assert openai.__version__ == '$VERSION', openai.__version__"
touch "$stamp"
echo "openai $VERSION installed in $venv" >&2
