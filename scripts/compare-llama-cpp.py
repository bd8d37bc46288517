#!/usr/bin/env python3
"""Side-by-side speed of nanollm and llama.cpp on the same GGUF files, the two systems
alternating file by file and round by round (this project's VMs move ±15–40% with their
neighbours, so only figures from one run, interleaved, compare).

Per file and round:
  nanollm  bench --compare kv-cache --prompt-len 128,512 --gen-len 64 --runs 1 --warmup 1
           -> TTFT at 128 and 512 prompt tokens, TPOT after the 128-token prompt
  llama.cpp llama-bench -p 128,512 -n 0, then -p 0 -n 64 -d 128
           -> TTFT = prompt tokens / pp tokens/s, ms/token = 1000 / tg tokens/s at depth 128
Both on --threads (default 2). Prints one markdown table: median and min per cell, and
nanollm's median over llama.cpp's. Every round's raw figures go to --raw FILE (JSON lines).

Usage: scripts/compare-llama-cpp.py [--rounds 5] [--nanollm target/release/nanollm]
         [--llama-bench vendor/llama.cpp/build/bin/llama-bench] FILE.gguf ...
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile


def nanollm_round(exe, model, threads):
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        subprocess.run(
            [exe, "bench", "-m", model, "--compare", "kv-cache", "--prompt-len", "128,512",
             "--gen-len", "64", "--runs", "1", "--warmup", "1", "--threads", str(threads),
             "--json", f.name],
            check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        doc = json.load(open(f.name))
    by_len = {r["prompt_len"]: r for r in doc["runs"]}
    return {"ttft128": by_len[128]["ttft_ms"], "ttft512": by_len[512]["ttft_ms"],
            "tpot": by_len[128]["tpot_ms"]}


def llama_round(exe, model, threads):
    def bench(extra):
        out = subprocess.run([exe, "-m", model, "-t", str(threads), "-r", "1", "-o", "json"] + extra,
                             check=True, capture_output=True, text=True).stdout
        return json.loads(out)
    pp = {r["n_prompt"]: r["avg_ts"] for r in bench(["-p", "128,512", "-n", "0"])}
    tg = bench(["-p", "0", "-n", "64", "-d", "128"])[0]["avg_ts"]
    return {"ttft128": 128e3 / pp[128], "ttft512": 512e3 / pp[512], "tpot": 1e3 / tg}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", nargs="+")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--nanollm", default="target/release/nanollm")
    ap.add_argument("--llama-bench", default="vendor/llama.cpp/build/bin/llama-bench")
    ap.add_argument("--raw", default=None)
    a = ap.parse_args()
    for exe in (a.nanollm, a.llama_bench):
        if not os.access(exe, os.X_OK):
            sys.exit(f"error: {exe} is not an executable (build it first)")
    figs = {}
    raw = open(a.raw, "w") if a.raw else None
    for rnd in range(1, a.rounds + 1):
        for f in a.files:
            # Alternate which system goes first from round to round.
            order = [("nanollm", nanollm_round, a.nanollm), ("llama.cpp", llama_round, a.llama_bench)]
            if rnd % 2 == 0:
                order.reverse()
            for name, run, exe in order:
                r = run(exe, f, a.threads)
                for k, v in r.items():
                    figs.setdefault((f, name, k), []).append(v)
                line = {"round": rnd, "file": os.path.basename(f), "system": name, **r}
                print(json.dumps(line), file=sys.stderr)
                if raw:
                    print(json.dumps(line), file=raw, flush=True)
    print(f"| file | cell | nanollm median (min) | llama.cpp median (min) | nanollm / llama.cpp |")
    print("|---|---|---|---|---|")
    names = {"ttft128": "TTFT 128 tokens, ms", "ttft512": "TTFT 512 tokens, ms",
             "tpot": "decode ms/token (after 128)"}
    for f in a.files:
        for k, label in names.items():
            n, l = figs[(f, "nanollm", k)], figs[(f, "llama.cpp", k)]
            mn, ml = statistics.median(n), statistics.median(l)
            print(f"| {os.path.basename(f)} | {label} | {mn:.1f} ({min(n):.1f}) | {ml:.1f} ({min(l):.1f}) | {mn / ml:.2f} |")


if __name__ == "__main__":
    main()
