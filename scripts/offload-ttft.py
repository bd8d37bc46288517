#!/usr/bin/env python3
"""TTFT of a request sharing a long prefix, from each tier: a miss (cold prefill), a pool
hit, a disk hit after the pool evicted the prefix, a disk hit after a server restart — each
disk hit once warm (the files in the page cache) and once cold (fsync, then
posix_fadvise(DONTNEED) on every file, checked with fincore when present) — and the bytes
each disk hit read (/metrics' nanollm_kv_offload_bytes_total{direction="read"}).

Starts `nanollm serve` with --kv-offload-dir (a fresh temporary directory) and a --kv-mem
that holds a little more than one long prompt, so two other long prompts evict every block of
the shared prefix.
Each request streams 1 token; TTFT is measured by the client, request sent to first token.

Usage: scripts/offload-ttft.py [--binary target/release/nanollm] [--prefix-tokens 4096]
                               [--kv-mem 160MiB] [--rounds 1] [--json FILE]
Standard library only.
"""
import argparse
import http.client
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from urllib.parse import urlparse


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--binary", default="target/release/nanollm")
    p.add_argument("--model", default=None)
    p.add_argument("--prefix-tokens", type=int, default=4096)
    p.add_argument("--kv-mem", default="120MiB")
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--json", default=None)
    return p.parse_args()


def long_text(seed, approx_tokens):
    """Numbered sentences (~17 tokens each with SmolLM2's tokenizer), different for each seed."""
    words = ["harbour", "tide", "anchor", "lighthouse", "pilot", "channel", "buoy", "keel"]
    out, n = [], 0
    while n * 17 < approx_tokens:
        w = words[(n * 7 + seed) % len(words)]
        out.append(f"Log {seed}-{n}: the {w} was checked at hour {(n * 13 + seed) % 24}.")
        n += 1
    return " ".join(out)


class Server:
    def __init__(self, a, kvdir):
        args = [a.binary, "serve", "--port", "0", "--kv-offload-dir", kvdir,
                "--kv-mem", a.kv_mem, "--max-model-len", str(a.prefix_tokens + 512)]
        if a.model:
            args += ["--model", a.model]
        self.p = subprocess.Popen(args, stderr=subprocess.PIPE, text=True)
        for line in self.p.stderr:
            if "listening on " in line:
                self.base = urlparse(line.split("listening on ")[1].split()[0])
                break
        else:
            sys.exit("error: the server did not start")

    def conn(self):
        return http.client.HTTPConnection(self.base.hostname, self.base.port, timeout=600)

    def ttft(self, prompt):
        """(TTFT ms, prompt tokens, cached tokens) of one streamed 1-token completion."""
        c = self.conn()
        body = json.dumps({"prompt": prompt, "max_tokens": 1, "temperature": 0, "stream": True,
                           "stream_options": {"include_usage": True}})
        t0 = time.perf_counter()
        c.request("POST", "/v1/completions", body, {"content-type": "application/json"})
        r = c.getresponse()
        first, usage = None, None
        for raw in r:
            line = raw.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            ev = json.loads(line[6:])
            if first is None and ev.get("choices") and ev["choices"][0].get("text") is not None:
                first = (time.perf_counter() - t0) * 1e3
            if ev.get("usage"):
                usage = ev["usage"]
        c.close()
        cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0)
        return first, usage["prompt_tokens"], cached

    def metric(self, name):
        c = self.conn()
        c.request("GET", "/metrics")
        text = c.getresponse().read().decode()
        c.close()
        for line in text.splitlines():
            if line.startswith(name):
                return int(float(line.rsplit(" ", 1)[1]))
        return 0

    def stop(self):
        self.p.send_signal(signal.SIGTERM)
        self.p.wait(timeout=120)


def drop_page_cache(kvdir):
    """fsync and POSIX_FADV_DONTNEED every file; returns the pages still cached (fincore)."""
    for name in os.listdir(kvdir):
        fd = os.open(os.path.join(kvdir, name), os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
    if shutil.which("fincore") and os.listdir(kvdir):
        out = subprocess.run(["fincore", "--bytes", "--noheadings", "--raw", "-o", "RES"]
                             + [os.path.join(kvdir, n) for n in os.listdir(kvdir)],
                             capture_output=True, text=True).stdout
        return sum(int(x) for x in out.split() if x.isdigit())
    return None


def main():
    a = parse_args()
    shared = long_text(0, a.prefix_tokens)
    q = lambda i: f"{shared}\nQuestion {i}: which log mentions the tide first?"
    other = lambda s: long_text(s, a.prefix_tokens) + "\nQuestion: summarize."
    rows = []
    for rnd in range(a.rounds):
        kvdir = tempfile.mkdtemp(prefix="nanollm-offload-")
        s = Server(a, kvdir)
        read = lambda: s.metric('nanollm_kv_offload_bytes_total{direction="read"}')

        def measure(what, i, cache=None):
            before, disk0 = read(), s.metric("nanollm_prefix_cache_disk_hits_total")
            ms, n, cached = s.ttft(q(i))
            got, disk = read() - before, s.metric("nanollm_prefix_cache_disk_hits_total") - disk0
            rows.append({"round": rnd + 1, "case": what, "ttft_ms": round(ms, 1),
                         "prompt_tokens": n, "cached_tokens": cached, "disk_tokens": disk,
                         "bytes_read": got, "page_cache_bytes_left": cache})
            print(f"round {rnd + 1}  {what:32s} TTFT {ms:9.1f} ms  prompt {n}  cached {cached}"
                  f" (disk {disk})  read {got:,} B"
                  + ("" if cache is None else f"  (left in page cache: {cache:,} B)"),
                  file=sys.stderr)

        def evict():
            # Two other long prompts: every block of the shared prefix leaves the pool.
            for seed in (evict.seed, evict.seed + 1):
                s.ttft(other(seed))
            evict.seed += 2
        evict.seed = 91

        s.ttft(other(90))  # warm-up: weights paged in, threads started
        measure("miss (cold prefill)", 1)
        measure("pool hit", 2)
        evict()
        measure("disk hit after eviction, warm", 3)
        evict()
        measure("disk hit after eviction, cold", 4, drop_page_cache(kvdir))
        s.stop()
        s = Server(a, kvdir)
        s.ttft(other(97))
        measure("disk hit after restart, warm", 5)
        s.stop()
        s = Server(a, kvdir)
        s.ttft(other(98))
        measure("disk hit after restart, cold", 6, drop_page_cache(kvdir))
        s.stop()
        shutil.rmtree(kvdir, ignore_errors=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)
    print(json.dumps(rows))


if __name__ == "__main__":
    main()
