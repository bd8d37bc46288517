#!/usr/bin/env bash
# Install Debian's chromium and chromium-driver packages with apt-get, for the live page's
# browser test (`cargo test --release --test browser`) and scripts/screenshots.py.
# Does nothing when /usr/bin/chromium and /usr/bin/chromedriver are there already. Never
# downloads a browser from anywhere else. Needs root, or sudo (about 300 MB).
set -euo pipefail

if [ -x /usr/bin/chromium ] && [ -x /usr/bin/chromedriver ]; then
  echo "chromium and chromedriver already installed ($(/usr/bin/chromedriver --version 2>/dev/null | head -n 1))" >&2
  exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "error: apt-get not found: install Chromium and its chromedriver (the same version) with this system's package manager, as /usr/bin/chromium and /usr/bin/chromedriver" >&2
  exit 1
fi
if [ "$(id -u)" -eq 0 ]; then
  as_root=()
elif command -v sudo >/dev/null 2>&1; then
  as_root=(sudo)
else
  echo "error: installing chromium and chromium-driver needs root: run this script as root (or install sudo), or ask an administrator for: apt-get install chromium chromium-driver" >&2
  exit 1
fi
echo "installing Debian's chromium and chromium-driver with apt-get" >&2
${as_root[@]+"${as_root[@]}"} apt-get update -qq
${as_root[@]+"${as_root[@]}"} env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium chromium-driver
for f in /usr/bin/chromium /usr/bin/chromedriver; do
  if [ ! -x "$f" ]; then
    echo "error: apt-get finished but $f is missing" >&2
    exit 1
  fi
done
echo "installed: $(/usr/bin/chromedriver --version 2>/dev/null | head -n 1)" >&2
