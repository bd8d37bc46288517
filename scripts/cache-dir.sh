#!/usr/bin/env bash
# Print nanollm's cache directory, as `nanollm` resolves it: $NANOLLM_CACHE_DIR, else
# $XDG_CACHE_HOME/nanollm, else ~/.cache/nanollm. Sourced by the install scripts.
if [ -n "${NANOLLM_CACHE_DIR:-}" ]; then
  echo "$NANOLLM_CACHE_DIR"
elif [ -n "${XDG_CACHE_HOME:-}" ]; then
  echo "$XDG_CACHE_HOME/nanollm"
else
  echo "$HOME/.cache/nanollm"
fi
