#!/usr/bin/env python3
"""Soak `nanollm serve`: streaming clients for a fixed time, on loopback, then a verdict.

Starts `nanollm serve --port 0 --kv-mem 256MiB --max-model-len 1024` (the default model, or
--model), runs --clients streaming clients (completions and chat, prompts of 10-400 words,
some sharing an opening so the prefix cache hits, 8-96 tokens each, 10% of them hanging up
mid-stream) for --minutes, scraping /metrics every 5 s. Once the KV pool has stopped growing
(`nanollm_kv_cache_bytes_allocated` unchanged over three scrapes, and a quarter of the time
gone) the clients pause, the server drains, and the idle heap and RSS are read (warm); at the
end the same again (end). Passes (exit 0) when no request failed, no KV block is held by
anyone once idle, and the idle live heap (`nanollm_heap_live_bytes`, counted by the server's
allocator) at the end is within 1% of warm. Prints the figures, and writes them as JSON with
--json. Stops by itself; the server is killed on exit.

Usage: scripts/soak.py [--minutes 30] [--clients 16] [--binary target/release/nanollm]
                       [--model PATH] [--kv-mem 256MiB] [--json FILE]
Standard library only.
"""
import argparse
import http.client
import json
import random
import subprocess
import sys
import threading
import time
from urllib.parse import urlparse

WORDS = (
    "the cache holds keys and values for every layer so a new token reads what came before "
    "instead of computing it again blocks of sixteen tokens live in one pool and a table maps "
    "each sequence to its blocks while the scheduler decides who runs next and who must wait "
    "when memory runs short a sequence is preempted and later computed again from its prompt "
    "prefill reads the whole prompt at once and decode adds one token per step"
).split()
OPENINGS = [
    "You are a careful assistant. Answer plainly and briefly, and say when you are unsure. ",
    "Summarize the following notes about inference servers in two sentences. ",
]


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--minutes", type=float, default=30.0)
    p.add_argument("--clients", type=int, default=16)
    p.add_argument("--binary", default="target/release/nanollm")
    p.add_argument("--model", default=None)
    p.add_argument("--kv-mem", default="256MiB")
    p.add_argument("--json", default=None)
    a = p.parse_args()
    if a.minutes <= 0 or a.clients < 1:
        p.error("--minutes must be > 0 and --clients >= 1")
    return a


class Counts:
    def __init__(self):
        self.lock = threading.Lock()
        self.ok = 0
        self.failed = 0
        self.hung_up = 0
        self.tokens = 0
        self.errors = []

    def add(self, kind, tokens=0, error=None):
        with self.lock:
            setattr(self, kind, getattr(self, kind) + 1)
            self.tokens += tokens
            if error and len(self.errors) < 10:
                self.errors.append(error)


def metrics(host, port):
    """The server's /metrics as {name: value} (first sample of each name)."""
    c = http.client.HTTPConnection(host, port, timeout=30)
    try:
        c.request("GET", "/metrics")
        text = c.getresponse().read().decode()
    finally:
        c.close()
    out = {}
    for line in text.splitlines():
        if line.startswith("#") or " " not in line:
            continue
        name, value = line.rsplit(" ", 1)
        name = name.split("{", 1)[0] if "{" in name and name.endswith("}") else name
        out.setdefault(name, float(value))
    return out


def one_request(host, port, rng, counts):
    chat = rng.random() < 0.3
    words = [rng.choice(WORDS) for _ in range(rng.randint(10, 400))]
    text = (rng.choice(OPENINGS) if rng.random() < 0.4 else "") + " ".join(words)
    body = {"max_tokens": rng.randint(8, 96), "stream": True, "ignore_eos": rng.random() < 0.5,
            "stream_options": {"include_usage": True}}
    if rng.random() < 0.3:
        body["temperature"] = 0.8
    if chat:
        body["messages"] = [{"role": "user", "content": text}]
        path = "/v1/chat/completions"
    else:
        body["prompt"] = text
        path = "/v1/completions"
    hang_up_after = rng.randint(1, 6) if rng.random() < 0.1 else None
    c = http.client.HTTPConnection(host, port, timeout=600)
    try:
        c.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
        r = c.getresponse()
        if r.status != 200:
            counts.add("failed", error=f"HTTP {r.status}: {r.read()[:200]!r}")
            return
        events, done, tokens = 0, False, 0
        while True:
            line = r.readline()
            if not line:
                break
            line = line.decode().strip()
            if not line.startswith("data: "):
                continue
            data = line[len("data: "):]
            if data == "[DONE]":
                done = True
                break
            v = json.loads(data)
            if "error" in v:
                counts.add("failed", error=f"error event: {v['error']}")
                return
            if v.get("usage"):
                tokens = v["usage"].get("completion_tokens", 0)
            events += 1
            if hang_up_after is not None and events >= hang_up_after:
                counts.add("hung_up")
                return  # the connection closes below: the server sees a disconnect
        if done:
            counts.add("ok", tokens)
        else:
            counts.add("failed", error="the stream ended without data: [DONE]")
    except (OSError, http.client.HTTPException, ValueError) as e:
        counts.add("failed", error=f"{type(e).__name__}: {e}")
    finally:
        c.close()


def client(i, host, port, go, stop, counts):
    rng = random.Random(1000 + i)
    while not stop.is_set():
        go.wait()
        if stop.is_set():
            break
        one_request(host, port, rng, counts)


def idle_view(host, port, go, timeout=600):
    """Pause the clients, wait for the server to drain, read its idle figures, resume."""
    go.clear()
    t0 = time.time()
    while time.time() - t0 < timeout:
        m = metrics(host, port)
        if m.get("nanollm_num_requests_running", 1) == 0 and m.get("nanollm_num_requests_waiting", 1) == 0:
            time.sleep(1.0)  # let finished requests' buffers go
            return metrics(host, port)
        time.sleep(0.5)
    raise SystemExit("soak: the server did not drain in 10 minutes")


def main():
    a = parse_args()
    cmd = [a.binary, "serve", "--port", "0", "--kv-mem", a.kv_mem, "--max-model-len", "1024",
           "--max-num-seqs", "16"]
    if a.model:
        cmd += ["--model", a.model]
    server = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    log = []
    url_box = []
    ready = threading.Event()

    def read_log():
        for line in server.stderr:
            log.append(line)
            if "listening on " in line and not url_box:
                url_box.append(line.split("listening on ", 1)[1].split()[0])
                ready.set()
        ready.set()

    threading.Thread(target=read_log, daemon=True).start()
    try:
        if not ready.wait(180) or not url_box:
            raise SystemExit("soak: the server did not start:\n" + "".join(log[-20:]))
        u = urlparse(url_box[0])
        host, port = u.hostname, u.port
        assert host in ("127.0.0.1", "localhost", "::1"), f"loopback only, got {host}"
        counts = Counts()
        go, stop = threading.Event(), threading.Event()
        go.set()
        threads = [threading.Thread(target=client, args=(i, host, port, go, stop, counts), daemon=True)
                   for i in range(a.clients)]
        start = time.time()
        end = start + a.minutes * 60
        for t in threads:
            t.start()
        samples, warm, allocated = [], None, []
        while time.time() < end:
            time.sleep(5)
            m = metrics(host, port)
            t = time.time() - start
            samples.append({"t_s": round(t, 1), "heap": m.get("nanollm_heap_live_bytes"),
                            "rss": m.get("nanollm_process_resident_memory_bytes"),
                            "kv_allocated": m.get("nanollm_kv_cache_bytes_allocated"),
                            "running": m.get("nanollm_num_requests_running")})
            allocated.append(m.get("nanollm_kv_cache_bytes_allocated"))
            steady = len(allocated) >= 3 and len(set(allocated[-3:])) == 1
            if warm is None and steady and t >= a.minutes * 15 and end - time.time() > 20:
                w = idle_view(host, port, go)
                warm = {"t_s": round(time.time() - start, 1), "requests_ok": counts.ok, **pick(w)}
                print(f"warm at {warm['t_s']} s: heap {warm['heap']:.0f} B, RSS {warm['rss'] / 2**20:.1f} MiB, "
                      f"KV allocated {warm['kv_allocated'] / 2**20:.1f} MiB", flush=True)
                go.set()
        stop.set()
        e = idle_view(host, port, go)
        go.set()
        for t in threads:
            t.join(timeout=60)
        endv = {"t_s": round(time.time() - start, 1), **pick(e)}
        if warm is None:
            raise SystemExit("soak: the KV pool never stopped growing; run longer (--minutes)")
        drift = (endv["heap"] - warm["heap"]) / warm["heap"]
        report = {
            "minutes": a.minutes, "clients": a.clients, "kv_mem": a.kv_mem,
            "requests_ok": counts.ok, "requests_failed": counts.failed, "hung_up": counts.hung_up,
            "tokens": counts.tokens, "errors": counts.errors,
            "requests_after_warm": counts.ok - warm["requests_ok"],
            "warm": warm, "end": endv, "heap_drift": drift,
            "blocks_leaked": endv["blocks_used"],
            "preemptions": endv["preemptions"], "samples": samples,
        }
        print(f"requests {counts.ok} ok, {counts.failed} failed, {counts.hung_up} hung up on purpose, "
              f"{counts.tokens} tokens; {endv['preemptions']:.0f} preemptions")
        print(f"heap (idle) warm {warm['heap']:.0f} B -> end {endv['heap']:.0f} B ({drift * 100:+.3f}%); "
              f"RSS warm {warm['rss'] / 2**20:.1f} MiB -> end {endv['rss'] / 2**20:.1f} MiB; "
              f"blocks held at the end {endv['blocks_used']:.0f}")
        if a.json:
            with open(a.json, "w") as f:
                json.dump(report, f, indent=1)
        bad = []
        if counts.failed:
            bad.append(f"{counts.failed} requests failed: {counts.errors[:3]}")
        if endv["blocks_used"] != 0:
            bad.append(f"{endv['blocks_used']:.0f} KV blocks still held when idle")
        if abs(drift) > 0.01:
            bad.append(f"the idle heap moved {drift * 100:+.2f}% (more than 1%)")
        if counts.ok - warm["requests_ok"] < a.clients:
            bad.append("too few requests after warm-up to judge")
        if bad:
            print("soak FAILED: " + "; ".join(bad), file=sys.stderr)
            return 1
        print("soak passed")
        return 0
    finally:
        server.kill()
        server.wait()


def pick(m):
    return {"heap": m.get("nanollm_heap_live_bytes", 0.0),
            "rss": m.get("nanollm_process_resident_memory_bytes", 0.0),
            "kv_allocated": m.get("nanollm_kv_cache_bytes_allocated", 0.0),
            "blocks_used": m.get("nanollm_kv_cache_blocks_used", -1.0),
            "preemptions": m.get("nanollm_num_preemptions_total", 0.0)}


if __name__ == "__main__":
    sys.exit(main())
