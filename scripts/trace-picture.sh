#!/usr/bin/env bash
# The README's timeline: run-batch on 8 requests sharing their opening, with chunked prefill
# and a KV budget tight enough to preempt, traced (--trace), then drawn by `nanollm trace-svg`
# into docs/img/trace-timeline.svg. Usage: scripts/trace-picture.sh [path/to/nanollm]
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${1:-target/release/nanollm}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
opening="You are a careful assistant. Answer in one short paragraph, plainly, without lists, and say when you are not sure about a fact. Keep every answer under eighty words."
for q in "What is the capital of France?" "Why is the sky blue?" "Name three primary colours." \
         "What does a compiler do?" "How many legs does a spider have?" "What is a KV cache?" \
         "Write a haiku about the sea." "Who wrote Hamlet?"; do
  printf '{"prompt": "%s %s", "max_tokens": 48, "ignore_eos": true}\n' "$opening" "$q"
done > "$tmp/requests.jsonl"
"$bin" run-batch -i "$tmp/requests.jsonl" -o "$tmp/results.jsonl" --max-num-seqs 8 \
  --max-num-batched-tokens 32 --kv-mem 6MiB --max-model-len 256 --trace "$tmp/trace.json"
mkdir -p docs/img
"$bin" trace-svg "$tmp/trace.json" -o docs/img/trace-timeline.svg \
  --title "run-batch: 8 requests sharing an opening, 32-token chunks, 6 MiB of KV"
echo "wrote docs/img/trace-timeline.svg ($(wc -c < docs/img/trace-timeline.svg) bytes)"
