#!/usr/bin/env bash
# Run every fuzz target of fuzz/ (cargo fuzz, libFuzzer) for a share of SECONDS (default 3600:
# an hour in all), one after another, each seeded with fuzz/seeds/<target>/ (and, for
# chat_template, the real templates in tests/fixtures/chat_templates). Installs cargo-fuzz
# when it is missing; needs the nightly toolchain (`rustup toolchain install nightly`).
#   scripts/fuzz.sh [SECONDS] [TARGET...]
# The corpus each run grows is kept in fuzz/corpus/<target>/ (ignored by git); a crash, a
# timeout (-timeout=10 s) or an allocation over 2 GB (-rss_limit_mb=2048, and AddressSanitizer's
# malloc limit) stops that target and leaves its input in fuzz/artifacts/<target>/; the script
# then exits 1 after running the others. Reproduce one with
#   cargo +nightly fuzz run TARGET fuzz/artifacts/TARGET/crash-...
set -euo pipefail

root="$(cd "$(dirname "$(readlink -f "$0")")/.." && pwd)"
seconds="${1:-3600}"
shift || true
all="gguf_header safetensors_header hf_config tokenizer_config openai_body batch_jsonl kv_size_config kld_base chat_template"
targets="${*:-$all}"
case "$seconds" in
  '' | *[!0-9]*) echo "error: SECONDS must be a whole number of seconds, not '$seconds'" >&2; exit 2 ;;
esac

if ! cargo +nightly --version >/dev/null 2>&1; then
  echo "error: the nightly toolchain is needed (cargo fuzz builds with sanitizer flags): rustup toolchain install nightly" >&2
  exit 1
fi
if ! cargo fuzz --version >/dev/null 2>&1; then
  cargo install cargo-fuzz
fi

n=$(wc -w <<<"$targets")
share=$(( seconds / n ))
if [ "$share" -lt 1 ]; then share=1; fi
cd "$root/fuzz"
cargo +nightly fuzz build
failed=""
for t in $targets; do
  mkdir -p "corpus/$t"
  extra=""
  if [ "$t" = chat_template ]; then extra="$root/tests/fixtures/chat_templates"; fi
  echo "== $t: ${share}s"
  if ! cargo +nightly fuzz run "$t" "corpus/$t" "seeds/$t" $extra -- \
      -max_total_time="$share" -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=2048 -print_final_stats=1; then
    failed="$failed $t"
  fi
done
if [ -n "$failed" ]; then
  echo "error: these targets found a crash, timeout or huge allocation (inputs in fuzz/artifacts/):$failed" >&2
  exit 1
fi
