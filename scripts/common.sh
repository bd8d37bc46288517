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
# files installed. Returns 1 when flock is missing (no lock: runs may then overlap).
lock_cache() {
  command -v flock >/dev/null 2>&1 || return 1
  exec 9>"$1/$2"
  flock 9
}

# Remove temporary directories $1/$2* left by an earlier run that was killed (SIGKILL skips
# its cleanup trap). Only call this while holding the lock: no other run is using them.
remove_stale() {
  local d
  for d in "$1/$2"*; do
    [ -d "$d" ] && rm -rf "$d"
  done
  return 0
}
