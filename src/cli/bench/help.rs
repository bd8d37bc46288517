//! `nanollm bench --help`'s text after the flags: examples, what each benchmark measures, outputs.
pub const AFTER_HELP: &str = "\
Examples:
  nanollm bench --compare naive,kv-cache --prompt-len 128,512 --gen-len 128 --runs 3
  nanollm bench --prompt-len 16 --gen-len 8 --runs 1 --warmup 0 --json report.json --plot steps.svg
  nanollm bench --concurrency 1,2,4,8 --prompt-len 128 --gen-len 128
  nanollm bench --scenario shared-prefix --prefix-len 1k --suffix-len 64 --requests 16
  nanollm bench --scenario chat --turns 8
  nanollm bench --scenario chunked-prefill --long-prompt-len 4k
  nanollm bench --compare kv-cache,spec --prompt-len 128 --gen-len 128 --runs 5
  nanollm bench --spec-synth-rates 0,0.25,0.5,0.75,0.9,1 --spec-synth-k 1,2,4,8 --plot breakeven.svg
  nanollm bench --machine            (only this machine's limits: FMA peak, int8 roof, bandwidth, core-to-core)
  nanollm bench --base-url http://127.0.0.1:8000 --max-concurrency 1,8 --num-prompts 8 \\
    --prompt-len 128 --gen-len 128   (a running OpenAI-compatible server: nanollm serve, llama-server)

Serving (--concurrency, --scenario): requests run through the batched engine (continuous
batching, chunked prefill, prefix caching; see `nanollm run-batch --help`), greedy, KV-cached.
--concurrency: the same --num-prompts prompts (distinct windows of the text) at each level;
decode tok/s (aggregate) = sequences stepped per second over the steps that only decode;
output tok/s = all generated tokens / the whole run (vLLM's output token throughput).

Prompts: exactly N tokens each, the first N tokens of a public-domain text shipped with nanollm
(Jane Austen, Pride and Prejudice, chapters 1-2), tokenized raw (no chat template). Every run
decodes greedily and generates exactly --gen-len tokens (end-of-sequence ignored, as llama-bench
and vLLM's ignore_eos do), so every mode does the same work and must produce the same tokens.

Metrics per run (as vLLM's benchmark defines them), reported as mean ± std (min) over --runs:
  TTFT   time to first token: prefill + first sampling (ms)
  TPOT   time per output token after the first: (E2EL - TTFT) / (gen - 1) (ms)
  ITL    inter-token latency, p50 and p99 of each run's gaps (ms)
  E2EL   end-to-end latency of the run (ms)
  decode tokens/s = (gen - 1) / (E2EL - TTFT); prefill tokens/s = prompt / prefill time
Speedups (× over the baseline: naive when listed, else the first mode): TPOT and E2EL as
baseline mean / mode mean, decode tokens/s as mode mean / baseline mean.

Roofline: before the runs, bench measures this machine's limits (about 1–2 s, on --threads
threads): the f32 FMA peak (GFLOP/s), the int8 dot-product roof (with the decode kernels' own
instruction: AVX-512 VNNI's vpdpbusd where present, else vpmaddubsw/vpmaddwd; GOP/s at 2 ops
per multiply-add) and the streaming read bandwidth (GB/s = 10^9 bytes/s, over 512 MiB, and
over a buffer the size of the decode weights, which the CPU's caches may hold: % of cached)
and the core-to-core latency (a cache line's round trip between two threads, ns).
Each (mode, prompt) then gets: prefill FLOPs counted from the model's shapes (2 per weight per
row, attention's QK^T and PV over the causal triangle, the LM head for the last row only) over
the mean prefill time (GFLOP/s, % of the f32 peak), and per decode token the bytes read (every
weight matrix once, LM head included, + the K/V at the mean context in the KV dtype) over the
mean TPOT (GB/s, % of the bandwidth), with each phase's FLOP/byte. --machine measures only the
limits (no model is loaded) and prints them, or writes them as JSON with --json.

Speculative decoding: --compare ...,spec runs kv-cache with --spec's drafts (prompt lookup,
4 drafts, by default) and checks the tokens equal plain decoding's. --spec-synth-rates
measures the break-even instead: drafts copied from the prompt's known greedy continuation,
each right with the given probability when the drafts before it were (a conditional rate, the
same at every position; llama.cpp's --spec-synth-rates lists unconditional ones), every
draft verified, for each k of --spec-synth-k; a plain run and each (k, rate) alternate in
every round (--runs), and the table gives decode tokens/s and the speedup over the same
round's plain run (--plot FILE.svg charts it; --json FILE writes it).

Token counts (--prompt-len, --gen-len) use kv-size's grammar: k = 1,024 tokens (1k = 1024).

Output: progress on stderr, the table, the roofline table and a step-latency chart on stdout;
--json FILE writes the whole report (settings, machine, every run's samples and steps, summaries,
speedups, token check, roofline); --plot FILE.svg draws the step-latency chart with the roofline
chart under it.
--json - (or --plot -) writes that document to stdout instead, and the table goes to stderr.

Exit status: 0 success; 1 error (a bad value included: --runs 0, --gen-len 1 when comparing
decode modes, an unknown mode); 2 command-line syntax (an unknown flag, a missing value, flags that conflict); 3 the modes generated different tokens (loud
warning on stderr, report still written), or with --base-url some requests failed (each
failure on stderr, report still written); 130 interrupted by Ctrl-C (no report).";
