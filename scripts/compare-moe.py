#!/usr/bin/env python3
"""The mixture-of-experts cells of issue 57, nanollm against llama.cpp on the same GGUF, the
two systems alternating round by round (this VM moves ±15–40% with its neighbours):

  decode ms/token after 128 and after 4,096 prompt tokens, TTFT at 128 and 512 tokens,
  decode tokens/s of 8 sequences at once (128-token prompts, 32 tokens each), peak RSS
  (/usr/bin/time -v, the largest of a round's runs) and load time.

nanollm: `bench --compare kv-cache --prompt-len 128,512 --gen-len 32 --warmup 1` (TTFT,
TPOT after 128; its "model load"), `bench --prompt-len 4096 --gen-len 16 --warmup 0` (TPOT
after 4,096, or --long), `bench --concurrency 8 --num-prompts 8 --prompt-len 128 --gen-len 32 --kv-mem 1GiB
--max-model-len 2048`
(decode_tokens_per_s). llama.cpp: `llama-bench -p 128,512 -n 0` (TTFT = tokens / pp t/s),
`llama-bench -p 0 -n 32,16 -d 128,4096` (ms/token = 1000 / tg t/s at each depth), and
`llama-batched-bench -npp 128 -ntg 32 -npl 8` (S_TG), and for its load time (it prints
none) the wall time of `llama-bench -p 0 -n 1 --no-warmup`, one token included. 2 threads.
Prints a markdown table (median and min of each cell) and every round as JSON lines on
stderr (and to --raw FILE).

Usage: scripts/compare-moe.py [--rounds 5] [--first-round 1] [--raw FILE] FILE.gguf
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

BIN = "vendor/llama.cpp/build/bin"
# The long context of the second decode cell (--long).
LONG = 4096


def timed(cmd):
    """Run `cmd` under /usr/bin/time -v: (stdout, stderr, peak RSS in bytes)."""
    p = subprocess.run(["/usr/bin/time", "-v"] + cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"error: {' '.join(cmd)} failed:\n{p.stderr[-2000:]}")
    rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", p.stderr).group(1)) * 1024
    return p.stdout, p.stderr, rss


def nanollm(exe, model, threads):
    out = {}
    rss = []
    with tempfile.TemporaryDirectory() as d:
        j = os.path.join(d, "a.json")
        _, _, r = timed([exe, "bench", "-m", model, "--compare", "kv-cache", "--prompt-len", "128,512",
                         "--gen-len", "32", "--runs", "1", "--warmup", "1", "--threads", str(threads),
                         "--json", j])
        rss.append(r)
        doc = json.load(open(j))
        by_len = {x["prompt_len"]: x for x in doc["runs"]}
        out["ttft128"] = by_len[128]["ttft_ms"]
        out["ttft512"] = by_len[512]["ttft_ms"]
        out["tpot128"] = by_len[128]["tpot_ms"]
        out["load_s"] = doc["settings"]["load_ms"] / 1e3
        _, _, r = timed([exe, "bench", "-m", model, "--compare", "kv-cache", "--prompt-len", str(LONG),
                         "--gen-len", "16", "--runs", "1", "--warmup", "0", "--threads", str(threads),
                         "--json", j])
        rss.append(r)
        out["tpot4096"] = json.load(open(j))["runs"][0]["tpot_ms"]
        _, _, r = timed([exe, "bench", "-m", model, "--concurrency", "8", "--num-prompts", "8",
                         "--prompt-len", "128", "--gen-len", "32", "--kv-mem", "1GiB", "--max-model-len", "2048",
                         "--threads", str(threads),
                         "--json", j])
        rss.append(r)
        out["batch8_tps"] = json.load(open(j))["result"]["levels"][0]["decode_tokens_per_s"]
    out["rss_gib"] = max(rss) / 2**30
    return out


def llama(model, threads):
    out = {}
    rss = []
    so, _, r = timed([f"{BIN}/llama-bench", "-m", model, "-t", str(threads), "-r", "1", "-o", "json",
                      "-p", "128,512", "-n", "0"])
    rss.append(r)
    pp = {x["n_prompt"]: x["avg_ts"] for x in json.loads(so)}
    out["ttft128"] = 128e3 / pp[128]
    out["ttft512"] = 512e3 / pp[512]
    so, _, r = timed([f"{BIN}/llama-bench", "-m", model, "-t", str(threads), "-r", "1", "-o", "json",
                      "-p", "0", "-n", "32", "-d", f"128,{LONG}"])
    rss.append(r)
    tg = {x["n_depth"]: x["avg_ts"] for x in json.loads(so)}
    out["tpot128"] = 1e3 / tg[128]
    out["tpot4096"] = 1e3 / tg[LONG]
    so, se, r = timed([f"{BIN}/llama-batched-bench", "-m", model, "-t", str(threads), "-c", "1536",
                       "-npp", "128", "-ntg", "32", "-npl", "8", "--output-format", "jsonl"])
    rss.append(r)
    row = [json.loads(l) for l in so.splitlines() if l.startswith("{")][-1]
    out["batch8_tps"] = row["speed_tg"]
    # llama.cpp prints no load time here: the wall time of a run of one token, no warm-up.
    start = time.monotonic()
    _, _, r = timed([f"{BIN}/llama-bench", "-m", model, "-t", str(threads), "-r", "1", "-o", "json",
                     "-p", "0", "-n", "1", "--no-warmup"])
    out["load_s"] = time.monotonic() - start
    rss.append(r)
    out["rss_gib"] = max(rss) / 2**30
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("file")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--first-round", type=int, default=1,
                    help="number of the first round (to go on with a series; even rounds run llama.cpp first)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--nanollm", default="target/release/nanollm")
    ap.add_argument("--raw")
    ap.add_argument("--long", type=int, default=4096, help="the long decode cell's context")
    a = ap.parse_args()
    global LONG
    LONG = a.long
    figs = {}
    raw = open(a.raw, "a") if a.raw else None
    for rnd in range(a.first_round, a.first_round + a.rounds):
        order = [("nanollm", lambda: nanollm(a.nanollm, a.file, a.threads)),
                 ("llama.cpp", lambda: llama(a.file, a.threads))]
        if rnd % 2 == 0:
            order.reverse()
        for name, run in order:
            r = run()
            for k, v in r.items():
                figs.setdefault((name, k), []).append(v)
            line = json.dumps({"round": rnd, "system": name, **r})
            print(line, file=sys.stderr, flush=True)
            if raw:
                print(line, file=raw, flush=True)
    cells = [("tpot128", "decode ms/token after 128", False), ("tpot4096", "decode ms/token after 4,096", False),
             ("ttft128", "TTFT 128 tokens, ms", False), ("ttft512", "TTFT 512 tokens, ms", False),
             ("batch8_tps", "8 sequences, decode tokens/s", True), ("rss_gib", "peak RSS, GiB", False),
             ("load_s", "load, s", False)]
    print("| cell | nanollm median (min) | llama.cpp median (min) | nanollm / llama.cpp |")
    print("|---|---|---|---|")
    for k, label, higher in cells:
        n, l = figs[("nanollm", k)], figs[("llama.cpp", k)]
        best = max if higher else min
        mn, ml = statistics.median(n), statistics.median(l)
        print(f"| {label} | {mn:.2f} ({best(n):.2f}) | {ml:.2f} ({best(l):.2f}) | {mn / ml:.2f} |")


if __name__ == "__main__":
    main()
