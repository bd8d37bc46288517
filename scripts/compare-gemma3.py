#!/usr/bin/env python3
"""Gemma 3 (sliding-window layers) side by side with llama.cpp, the systems alternating
round by round (this project's VMs move ±15–40% with their neighbours).

Per round:
  nanollm  bench --compare kv-cache --prompt-len 128,2k --gen-len 32
           -> TTFT at 128 and 2,048 prompt tokens, TPOT after 128
           bench --compare kv-cache,swa-full --prompt-len 8k --gen-len 32 --warmup 0
           -> TPOT after 8,192 tokens: the window read alone, and the full cache masked
  llama.cpp llama-bench -p 128,2048 -n 0; -p 0 -n 32 -d 128,8192
           -> TTFT = tokens / pp tokens/s; ms/token = 1000 / tg tokens/s at each depth
Both on --threads (default 2). Prints a markdown table: every round's figures, then the
median, and writes the raw figures as JSON lines to --raw FILE.

Usage: scripts/compare-gemma3.py [--rounds 3] MODEL.gguf
"""
import argparse
import json
import statistics
import subprocess
import tempfile


def nanollm_bench(exe, model, threads, args):
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        subprocess.run([exe, "bench", "-m", model, "--threads", str(threads), "--runs", "1",
                        "--json", f.name] + args,
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        return json.load(open(f.name))["runs"]


def nanollm_round(exe, model, threads):
    short = {r["prompt_len"]: r for r in nanollm_bench(
        exe, model, threads, ["--compare", "kv-cache", "--prompt-len", "128,2048",
                              "--gen-len", "32", "--warmup", "1"])}
    long = {r["mode"]: r for r in nanollm_bench(
        exe, model, threads, ["--compare", "kv-cache,swa-full", "--prompt-len", "8192",
                              "--gen-len", "32", "--warmup", "0"])}
    return {"ttft128": short[128]["ttft_ms"], "ttft2k": short[2048]["ttft_ms"],
            "tpot128": short[128]["tpot_ms"], "tpot8k": long["kv-cache"]["tpot_ms"],
            "tpot8k_swa_full": long["swa-full"]["tpot_ms"],
            "ttft8k": long["kv-cache"]["ttft_ms"]}


def llama_round(exe, model, threads):
    def bench(extra):
        out = subprocess.run([exe, "-m", model, "-t", str(threads), "-r", "1", "-o", "json"] + extra,
                             check=True, capture_output=True, text=True).stdout
        return json.loads(out)
    pp = {r["n_prompt"]: r["avg_ts"] for r in bench(["-p", "128,2048", "-n", "0"])}
    tg = {r["n_depth"]: r["avg_ts"] for r in bench(["-p", "0", "-n", "32", "-d", "128,8192"])}
    return {"ttft128": 128e3 / pp[128], "ttft2k": 2048e3 / pp[2048],
            "tpot128": 1e3 / tg[128], "tpot8k": 1e3 / tg[8192]}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--nanollm", default="target/release/nanollm")
    ap.add_argument("--llama-bench", default="vendor/llama.cpp/build/bin/llama-bench")
    ap.add_argument("--raw", default=None)
    a = ap.parse_args()
    rows = []
    for r in range(a.rounds):
        ours = nanollm_round(a.nanollm, a.model, a.threads)
        theirs = llama_round(a.llama_bench, a.model, a.threads)
        rows.append({"round": r + 1, "nanollm": ours, "llama.cpp": theirs})
        print(json.dumps(rows[-1]), flush=True)
        if a.raw:
            with open(a.raw, "a") as f:
                f.write(json.dumps(rows[-1]) + "\n")
    keys = ["ttft128", "ttft2k", "tpot128", "tpot8k"]
    print("\n| round | system | TTFT 128 ms | TTFT 2k ms | ms/token at 128 | ms/token at 8k | at 8k, --swa-full |")
    print("|---|---|---|---|---|---|---|")
    for row in rows:
        for sysname in ("nanollm", "llama.cpp"):
            v = row[sysname]
            cells = [f"{v[k]:.1f}" for k in keys] + [f"{v['tpot8k_swa_full']:.1f}" if "tpot8k_swa_full" in v else "—"]
            print(f"| {row['round']} | {sysname} | " + " | ".join(cells) + " |")
    med = lambda s, k: statistics.median(r[s][k] for r in rows)
    for sysname in ("nanollm", "llama.cpp"):
        cells = [f"{med(sysname, k):.1f}" for k in keys]
        cells.append(f"{med(sysname, 'tpot8k_swa_full'):.1f}" if sysname == "nanollm" else "—")
        print(f"| median | {sysname} | " + " | ".join(cells) + " |")
    print("| median | ratio | " + " | ".join(f"{med('nanollm', k) / med('llama.cpp', k):.2f}" for k in keys) + " | |")


if __name__ == "__main__":
    main()
