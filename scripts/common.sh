# Shared by the install scripts (sourced, not run): nanollm's cache directory, the checks
# they all make before writing there, and one run at a time per cache directory.

# This script's directory, also when it is run through a symlink.
scripts_dir="$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")" && pwd)"

# nanollm's cache directory, as an absolute path ($NANOLLM_CACHE_DIR, else the XDG default).
cache_dir() {
  local dir
  dir="$("$scripts_dir/cache-dir.sh")"
  case "$dir" in /*) ;; *) dir="$PWD/$dir" ;; esac
  printf '%s\n' "$dir"
}

# Exit with one error line unless python3 is on PATH. $1: what it is needed for; $2: how to
# get it.
require_python3() {
  if ! command -v python3 >/dev/null 2>&1; then
    echo "error: python3 is needed to $1: $2" >&2
    exit 1
  fi
}

# Exit with one error line unless directory $1 exists (created if need be) and is writable.
require_writable() {
  if ! mkdir -p "$1" 2>/dev/null || [ ! -w "$1" ]; then
    echo "error: cannot write the cache directory $1: set NANOLLM_CACHE_DIR to a writable directory" >&2
    exit 1
  fi
}

# Hold lock file $1/$2 (fd 9) until the script exits: a second run waits, then finds the
# files installed. Returns 1 when flock is missing (no lock: runs may then overlap); exits
# with an error line when the lock file cannot be opened (a directory, another user's).
lock_cache() {
  command -v flock >/dev/null 2>&1 || return 1
  if ! { exec 9>"$1/$2"; } 2>/dev/null; then
    echo "error: cannot open the lock file $1/$2 (a directory, or not writable): remove it" >&2
    exit 1
  fi
  flock 9
}

# Remove temporary entries $1/$2* left by an earlier run that was killed (SIGKILL skips
# its cleanup trap). Only call this while holding the lock: no other run is using them.
remove_stale() {
  local d
  for d in "$1/$2"*; do
    if [ -e "$d" ]; then
      rm -rf "$d" 2>/dev/null || true
    fi
  done
  return 0
}

# `python3 -m pip download` of $1 into $2 (further arguments passed on), with one error line
# when it fails. A pip.conf requiring a virtualenv does not apply: this only downloads.
pip_download() {
  local what="$1" to="$2"
  shift 2
  if ! PIP_REQUIRE_VIRTUALENV=0 python3 -m pip download --quiet --no-deps "$@" "$what" -d "$to"; then
    echo "error: pip could not download $what from PyPI (its message is above; python3 needs pip: e.g. apt install python3-pip)" >&2
    exit 1
  fi
}
