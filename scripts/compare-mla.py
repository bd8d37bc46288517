#!/usr/bin/env python3
"""Issue 58's cells, nanollm against llama.cpp on the same deepseek2 GGUF (MLA), the two
systems alternating round by round (this VM moves ±15–40% with its neighbours):

  decode ms/token after 128 and after 4,096 prompt tokens, TTFT at 128 and 512 tokens, and
  nanollm's decode after 4,096 on each MLA path (auto: generated rows absorbed; expanded:
  every step rebuilds each head's K and V from the latents).

nanollm: `bench --compare kv-cache --prompt-len 128,512 --gen-len 32 --warmup 1` (TTFT,
TPOT after 128), `bench --prompt-len 4096 --gen-len 16 --warmup 0` (TPOT after 4,096,
absorbed), the same with `--mla-path expanded --gen-len 4`. llama.cpp: `llama-bench -p
128,512 -n 0` (TTFT = tokens / pp t/s) and `llama-bench -p 0 -n 32 -d 128,4096` (ms/token =
1000 / tg t/s at each depth). 2 threads, KV cache f16 on both. Prints a markdown table
(median and min of each cell) and every round as JSON lines on stderr (and to --raw FILE).

Usage: scripts/compare-mla.py [--rounds 5] [--first-round 1] [--raw FILE] [--no-expanded] FILE.gguf
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

BIN = "vendor/llama.cpp/build/bin"
LONG = 4096


def run(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"error: {' '.join(cmd)} failed:\n{p.stderr[-2000:]}")
    return p.stdout


def nanollm(exe, model, threads, expanded=True):
    out = {}
    with tempfile.TemporaryDirectory() as d:
        j = os.path.join(d, "a.json")
        bench = [exe, "bench", "-m", model, "--compare", "kv-cache", "--runs", "1",
                 "--threads", str(threads), "--json", j]
        run(bench + ["--prompt-len", "128,512", "--gen-len", "32", "--warmup", "1"])
        by_len = {x["prompt_len"]: x for x in json.load(open(j))["runs"]}
        out["ttft128"] = by_len[128]["ttft_ms"]
        out["ttft512"] = by_len[512]["ttft_ms"]
        out["tpot128"] = by_len[128]["tpot_ms"]
        run(bench + ["--prompt-len", str(LONG), "--gen-len", "16", "--warmup", "0"])
        out["tpot4096"] = json.load(open(j))["runs"][0]["tpot_ms"]
        if expanded:
            run(bench + ["--prompt-len", str(LONG), "--gen-len", "4", "--warmup", "0",
                         "--mla-path", "expanded"])
            out["tpot4096_expanded"] = json.load(open(j))["runs"][0]["tpot_ms"]
    return out


def llama(model, threads):
    out = {}
    so = run([f"{BIN}/llama-bench", "-m", model, "-t", str(threads), "-r", "1", "-o", "json",
              "-p", "128,512", "-n", "0"])
    pp = {x["n_prompt"]: x["avg_ts"] for x in json.loads(so)}
    out["ttft128"] = 128e3 / pp[128]
    out["ttft512"] = 512e3 / pp[512]
    so = run([f"{BIN}/llama-bench", "-m", model, "-t", str(threads), "-r", "1", "-o", "json",
              "-p", "0", "-n", "32", "-d", f"128,{LONG}"])
    tg = {x["n_depth"]: x["avg_ts"] for x in json.loads(so)}
    out["tpot128"] = 1e3 / tg[128]
    out["tpot4096"] = 1e3 / tg[LONG]
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("file")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--first-round", type=int, default=1,
                    help="number of the first round (even rounds run llama.cpp first)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--nanollm", default="target/release/nanollm")
    ap.add_argument("--raw")
    ap.add_argument("--no-expanded", action="store_true",
                    help="skip nanollm's expanded-path cell (about 2 minutes a round)")
    a = ap.parse_args()
    figs = {}
    raw = open(a.raw, "a") if a.raw else None
    for rnd in range(a.first_round, a.first_round + a.rounds):
        order = [("nanollm", lambda: nanollm(a.nanollm, a.file, a.threads, not a.no_expanded)),
                 ("llama.cpp", lambda: llama(a.file, a.threads))]
        if rnd % 2 == 0:
            order.reverse()
        for name, fn in order:
            r = fn()
            for k, v in r.items():
                figs.setdefault((name, k), []).append(v)
            line = json.dumps({"round": rnd, "system": name, **r})
            print(line, file=sys.stderr, flush=True)
            if raw:
                print(line, file=raw, flush=True)
    cells = [("tpot128", "decode ms/token after 128"), ("tpot4096", "decode ms/token after 4,096"),
             ("ttft128", "TTFT 128 tokens, ms"), ("ttft512", "TTFT 512 tokens, ms")]
    print("| cell | nanollm median (min) | llama.cpp median (min) | nanollm / llama.cpp |")
    print("|---|---|---|---|")
    for k, label in cells:
        n, l = figs[("nanollm", k)], figs[("llama.cpp", k)]
        mn, ml = statistics.median(n), statistics.median(l)
        print(f"| {label} | {mn:.2f} ({min(n):.2f}) | {ml:.2f} ({min(l):.2f}) | {mn / ml:.2f} |")
    e = figs.get(("nanollm", "tpot4096_expanded"))
    if e:
        print(f"| nanollm decode after 4,096, expanded path | {statistics.median(e):.2f} ({min(e):.2f}) | | |")


if __name__ == "__main__":
    main()
