#!/usr/bin/env python3
"""Two builds of nanollm side by side on the same files, alternating, for "no speed change"
claims (a refactor against the commit before it):

    scripts/compare-builds.py --rounds 5 BEFORE_BIN AFTER_BIN MODEL.gguf [MODEL.gguf ...]

Per file and round, each build runs `nanollm bench --compare kv-cache --prompt-len 128,512
--gen-len 64 --runs 1 --warmup 1` (the order of the two swaps every round); prints every
round and the medians of TTFT at 128 and 512 prompt tokens and decode ms/token (TPOT after
128), with after/before. Python's standard library only.
"""
import argparse
import json
import statistics
import subprocess
import tempfile

CELLS = {"ttft128": "TTFT 128 tokens, ms", "ttft512": "TTFT 512 tokens, ms",
         "tpot": "decode ms/token (after 128)"}


def one_round(exe, model, threads):
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        subprocess.run(
            [exe, "bench", "-m", model, "--compare", "kv-cache", "--prompt-len", "128,512",
             "--gen-len", "64", "--runs", "1", "--warmup", "1", "--threads", str(threads),
             "--json", f.name],
            check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        with open(f.name) as j:
            doc = json.load(j)
    by_len = {r["prompt_len"]: r for r in doc["runs"]}
    return {"ttft128": by_len[128]["ttft_ms"], "ttft512": by_len[512]["ttft_ms"],
            "tpot": by_len[128]["tpot_ms"]}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("before")
    ap.add_argument("after")
    ap.add_argument("models", nargs="+")
    a = ap.parse_args()
    builds = [("before", a.before), ("after", a.after)]
    for model in a.models:
        got = {"before": [], "after": []}
        for r in range(a.rounds):
            order = builds if r % 2 == 0 else builds[::-1]
            for name, exe in order:
                got[name].append(one_round(exe, model, a.threads))
        print(f"\n{model} ({a.rounds} rounds, alternating)")
        print("| cell | before median | after median | after / before | before, every round | after, every round |")
        print("|---|---|---|---|---|---|")
        for key, label in CELLS.items():
            b = [x[key] for x in got["before"]]
            f = [x[key] for x in got["after"]]
            mb, mf = statistics.median(b), statistics.median(f)
            print(f"| {label} | {mb:.2f} | {mf:.2f} | {mf / mb:.3f} | "
                  f"{' '.join(f'{v:.1f}' for v in b)} | {' '.join(f'{v:.1f}' for v in f)} |")


if __name__ == "__main__":
    main()
