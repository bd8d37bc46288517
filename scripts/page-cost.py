#!/usr/bin/env python3
"""What watching the engine costs: `nanollm bench --base-url` throughput with the live page
open and without, in alternated pairs, and the engine-thread time spent building states.

Starts `nanollm serve --port 0` (the default model, or --model), then runs --pairs pairs of
`nanollm bench --base-url URL --max-concurrency 8` (the order alternates: off/on, on/off, ...).
"on" means a viewer is open for the whole run: `--viewer browser` (default) is the real page
in headless Chromium (Debian's package, as the browser test; the renderer shares the machine's
cores with the engine), `--viewer stream` a plain reader of /v1/state/stream. After each run
the engine's counters are read from /v1/state: the share of engine step time spent building
states (observe.cpu_ms over counters.step_ms, both differenced over the run).

Usage: scripts/page-cost.py [--pairs 5] [--viewer browser|stream] [--binary target/release/nanollm]
                            [--model PATH] [--num-prompts 32] [--json FILE]
Standard library only.
"""
import argparse
import http.client
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from urllib.parse import urlparse


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pairs", type=int, default=5)
    p.add_argument("--viewer", choices=["browser", "stream"], default="browser")
    p.add_argument("--binary", default="target/release/nanollm")
    p.add_argument("--model", default=None)
    p.add_argument("--num-prompts", type=int, default=32)
    p.add_argument("--json", default=None)
    a = p.parse_args()
    if a.pairs < 1 or a.num_prompts < 1:
        p.error("--pairs and --num-prompts must be >= 1")
    return a


def start_server(a):
    cmd = [a.binary, "serve", "--port", "0", "--max-num-seqs", "8"]
    if a.model:
        cmd += ["--model", a.model]
    srv = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)
    for line in srv.stderr:
        if "listening on " in line:
            url = line.split("listening on ")[1].split()[0]
            threading.Thread(target=lambda: [None for _ in srv.stderr], daemon=True).start()
            return srv, url
    sys.exit("page-cost: the server did not start")


def get_state(url):
    u = urlparse(url)
    c = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
    c.request("GET", "/v1/state")
    r = c.getresponse()
    body = r.read()
    c.close()
    if r.status != 200:
        sys.exit(f"page-cost: GET /v1/state answered {r.status}")
    return json.loads(body)


class StreamViewer:
    """Reads /v1/state/stream until closed."""

    def __init__(self, url):
        u = urlparse(url)
        self.conn = http.client.HTTPConnection(u.hostname, u.port, timeout=600)
        self.conn.request("GET", "/v1/state/stream")
        self.resp = self.conn.getresponse()
        self.events = 0
        self.stop = False
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        try:
            while not self.stop:
                line = self.resp.readline()
                if not line:
                    return
                if line.startswith(b"event:"):
                    self.events += 1
        except OSError:
            return

    def close(self):
        self.stop = True
        try:
            self.conn.sock.shutdown(2)
        except OSError:
            pass
        self.conn.close()


class BrowserViewer:
    """The live page in headless Chromium, open until closed."""

    def __init__(self, url):
        chromium = shutil.which("chromium") or "/usr/bin/chromium"
        if not os.path.exists(chromium):
            sys.exit("page-cost: chromium is missing: run scripts/install-chromium.sh")
        self.profile = tempfile.mkdtemp(prefix="nanollm-page-cost-")
        self.proc = subprocess.Popen(
            [chromium, "--headless", "--no-sandbox", "--disable-gpu",
             "--disable-background-networking", "--disable-component-update", "--no-first-run",
             f"--user-data-dir={self.profile}", "--remote-debugging-port=0", url + "/"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        # Wait until the page's stream is open.
        for _ in range(200):
            if get_state(url)["observe"]["streams"] > 0:
                return
            time.sleep(0.05)
        self.close()
        sys.exit("page-cost: the page never opened its stream")

    def close(self):
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        shutil.rmtree(self.profile, ignore_errors=True)


def bench(a, url, seed):
    out = subprocess.run(
        [a.binary, "bench", "--base-url", url, "--max-concurrency", "8", "--num-prompts",
         str(a.num_prompts), "--prompt-len", "128", "--gen-len", "64", "--seed", str(seed),
         "--json", "-"],
        capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"page-cost: bench failed: {out.stderr.strip()[-500:]}")
    report = json.loads(out.stdout)
    level = report["levels"][0]
    return level


def main():
    a = parse_args()
    srv, url = start_server(a)
    rows = []
    try:
        bench(a, url, 999)  # warm-up: the pool materializes, the caches warm
        seed = 0
        for pair in range(a.pairs):
            order = ["off", "on"] if pair % 2 == 0 else ["on", "off"]
            for mode in order:
                seed += 1
                viewer = None
                if mode == "on":
                    viewer = BrowserViewer(url) if a.viewer == "browser" else StreamViewer(url)
                before = get_state(url)
                level = bench(a, url, seed)
                after = get_state(url)
                if viewer:
                    viewer.close()
                cpu = after["observe"]["cpu_ms"] - before["observe"]["cpu_ms"]
                step = after["counters"]["step_ms"] - before["counters"]["step_ms"]
                built = after["observe"]["snapshots"] - before["observe"]["snapshots"]
                row = {
                    "pair": pair + 1, "page": mode,
                    "output_tokens_per_s": level.get("output_tokens_per_s"),
                    "states_built": built, "build_ms": cpu, "step_ms": step,
                    "build_share_pct": 100.0 * cpu / step if step > 0 else 0.0,
                }
                rows.append(row)
                print(f"pair {row['pair']} page {mode:3}: {row['output_tokens_per_s']:.1f} output "
                      f"tokens/s, {built} states built in {cpu:.2f} ms of {step:.0f} ms of steps "
                      f"({row['build_share_pct']:.4f}%)", file=sys.stderr)
                time.sleep(1)
    finally:
        srv.terminate()
        srv.wait(10)
    on = [r["output_tokens_per_s"] for r in rows if r["page"] == "on"]
    off = [r["output_tokens_per_s"] for r in rows if r["page"] == "off"]
    ratios = [r_on / r_off for r_on, r_off in zip(on, off)]
    share = max(r["build_share_pct"] for r in rows if r["page"] == "on")
    print(f"on/off throughput per pair: {', '.join(f'{x:.3f}' for x in ratios)}; "
          f"mean on {sum(on) / len(on):.1f}, off {sum(off) / len(off):.1f} tokens/s; "
          f"state building at most {share:.4f}% of engine step time", file=sys.stderr)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"viewer": a.viewer, "rows": rows, "ratios": ratios}, f, indent=2)


if __name__ == "__main__":
    main()
