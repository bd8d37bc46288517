#!/usr/bin/env bash
# Print nanollm's cache directory, as `nanollm` resolves it: $NANOLLM_CACHE_DIR, else
# $XDG_CACHE_HOME/nanollm (when absolute; the XDG spec ignores a relative one), else
# ~/.cache/nanollm ($HOME, or the password database's home when HOME is unset or empty).
# Run by the install scripts (printf, not echo: a path such as `-n` prints as itself).
if [ -n "${NANOLLM_CACHE_DIR:-}" ]; then
  printf '%s\n' "$NANOLLM_CACHE_DIR"
elif [[ "${XDG_CACHE_HOME:-}" == /* ]]; then
  printf '%s\n' "$XDG_CACHE_HOME/nanollm"
else
  home="${HOME:-}"
  if [ -z "$home" ]; then
    home="$(getent passwd "$(id -u)" 2>/dev/null | cut -d: -f6)"
  fi
  printf '%s\n' "${home:-.}/.cache/nanollm"
fi
