#!/usr/bin/env python3
"""Screenshots of nanollm serve's live page during real runs, for the docs.

Starts `nanollm serve` (the default model), opens its page in headless Chromium through
chromedriver (WebDriver over HTTP), sends 8 streaming completions that share a long prefix
and saves the page mid-run:

  docs/img/page-shared-prefix.png   8 streams sharing their prompt's first blocks
  docs/img/page-preemption.png      the same load under a tight --kv-mem: sequences preempted

Needs Debian's chromium and chromium-driver (scripts/install-chromium.sh) and a built binary
(`cargo build --release`). Python standard library only.

  scripts/screenshots.py [--binary target/release/nanollm] [--out docs/img]
"""
import argparse
import base64
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WIDTH, HEIGHT = 1280, 900
PREFIX = (
    "You are a careful assistant who explains how computers work to curious students. "
    "Answer in one short paragraph, plainly, without lists or headings, and say so when you "
    "are not sure about a fact. Keep every answer under eighty words, use simple words, and "
    "give one small example from everyday life when it helps the student understand. "
)
QUESTIONS = [
    "What is a CPU cache?",
    "Why is memory slower than the processor?",
    "What does a compiler do?",
    "How does a hard disk store data?",
    "What is an operating system for?",
    "Why do programs use threads?",
    "What is a network packet?",
    "How does a keyboard send a key press?",
]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http(method, url, body=None, timeout=60):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method)
    if data is not None:
        req.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read() or b"null")


class Serve:
    """`nanollm serve --port 0 ARGS…`, its address read from its first line."""

    def __init__(self, binary, args):
        self.proc = subprocess.Popen(
            [binary, "serve", "--port", "0", *args],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.base = None
        deadline = time.time() + 120
        for line in self.proc.stderr:
            m = re.search(r"listening on (http://\S+)", line)
            if m:
                self.base = m.group(1)
                break
            if time.time() > deadline:
                break
        if not self.base:
            self.stop()
            sys.exit(f"error: nanollm serve did not start ({binary} {' '.join(args)})")
        # Keep draining its log so it never blocks on a full pipe.
        threading.Thread(target=lambda: [None for _ in self.proc.stderr], daemon=True).start()

    def state(self):
        return http("GET", self.base + "/v1/state")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()


class Browser:
    """Headless Chromium through chromedriver's WebDriver HTTP API."""

    def __init__(self):
        driver = shutil.which("chromedriver") or "/usr/bin/chromedriver"
        chromium = shutil.which("chromium") or "/usr/bin/chromium"
        if not (os.path.exists(driver) and os.path.exists(chromium)):
            sys.exit("error: chromium and chromedriver are needed: run scripts/install-chromium.sh")
        self.profile = tempfile.mkdtemp(prefix="nanollm-shots-")
        port = free_port()
        self.proc = subprocess.Popen(
            [driver, f"--port={port}"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        self.base = f"http://127.0.0.1:{port}"
        deadline = time.time() + 30
        while True:
            try:
                if http("GET", self.base + "/status", timeout=2)["value"]["ready"]:
                    break
            except (OSError, ValueError, KeyError):
                pass
            if time.time() > deadline:
                self.close()
                sys.exit("error: chromedriver did not start")
            time.sleep(0.1)
        caps = {
            "capabilities": {
                "alwaysMatch": {
                    "browserName": "chrome",
                    "goog:chromeOptions": {
                        "binary": chromium,
                        "args": [
                            "--headless",
                            "--no-sandbox",
                            "--disable-gpu",
                            "--disable-background-networking",
                            "--disable-component-update",
                            "--no-first-run",
                            "--hide-scrollbars",
                            f"--window-size={WIDTH},{HEIGHT}",
                            f"--user-data-dir={self.profile}",
                        ],
                    },
                }
            }
        }
        self.session = http("POST", self.base + "/session", caps)["value"]["sessionId"]
        # --window-size counts the window, not the page: grow it until the page is WIDTH×HEIGHT.
        inner = self.run("return [window.innerWidth, window.innerHeight]")
        rect = self.cmd("GET", "/window/rect")
        self.cmd(
            "POST",
            "/window/rect",
            {"width": rect["width"] + WIDTH - inner[0], "height": rect["height"] + HEIGHT - inner[1]},
        )

    def cmd(self, method, path, body=None):
        return http(method, f"{self.base}/session/{self.session}{path}", body)["value"]

    def go(self, url):
        self.cmd("POST", "/url", {"url": url})

    def run(self, script):
        return self.cmd("POST", "/execute/sync", {"script": script, "args": []})

    def wait_for(self, script, what, timeout=120):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.run(script):
                return
            time.sleep(0.05)
        raise RuntimeError(f"the page never showed {what}")

    def screenshot(self, path):
        png = base64.b64decode(self.cmd("GET", "/screenshot"))
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(png)
        print(f"{path}: {len(png):,} bytes", file=sys.stderr)

    def close(self):
        try:
            if getattr(self, "session", None):
                http("DELETE", f"{self.base}/session/{self.session}", timeout=10)
        except OSError:
            pass
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        shutil.rmtree(self.profile, ignore_errors=True)


def stream(base, prompt, max_tokens):
    """One streaming completion, read to its end."""
    body = {"prompt": prompt, "max_tokens": max_tokens, "stream": True, "ignore_eos": True}
    req = urllib.request.Request(
        base + "/v1/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=300) as r:
        for _ in r:
            pass


def load(base, max_tokens, stagger, lead=""):
    """8 streams sharing PREFIX (then `lead`), started `stagger` seconds apart; returns their
    threads."""
    threads = []
    for q in QUESTIONS:
        prompt = PREFIX + lead + q
        t = threading.Thread(target=stream, args=(base, prompt, max_tokens), daemon=True)
        t.start()
        threads.append(t)
        time.sleep(stagger)
    return threads


def shot(binary, browser, serve_args, path, ready, what, max_tokens, stagger, settle):
    serve = Serve(binary, serve_args)
    try:
        browser.go(serve.base + "/")
        browser.wait_for(
            "return document.getElementById('status').dataset.status === 'live'", "a live stream", 30
        )
        # A first round, so the latency cards have finished requests and the prefix cache
        # holds blocks; then the round the picture is taken in.
        for t in load(serve.base, 24, 0.0, lead="In a few words, for a student who is new to all of this: "):
            t.join()
        threads = load(serve.base, max_tokens, stagger)
        browser.wait_for(ready, what)
        time.sleep(settle)
        browser.screenshot(path)
        for t in threads:
            t.join()
    finally:
        serve.stop()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--binary", default=os.path.join(ROOT, "target", "release", "nanollm"))
    p.add_argument("--out", default=os.path.join(ROOT, "docs", "img"))
    a = p.parse_args()
    if not os.path.exists(a.binary):
        sys.exit(f"error: {a.binary} is missing: cargo build --release (or --binary PATH)")
    browser = Browser()
    try:
        shot(
            a.binary,
            browser,
            ["--max-model-len", "1024", "--max-num-seqs", "8"],
            os.path.join(a.out, "page-shared-prefix.png"),
            "return document.querySelectorAll('.cell[data-state=shared]').length > 0 && "
            "document.querySelectorAll('tr[data-state=decoding]').length >= 6",
            "shared blocks and decoding sequences",
            max_tokens=96,
            stagger=0.05,
            settle=0.4,
        )
        # 30 blocks of 16 tokens: 8 sequences of ~100 prompt + 96 generated tokens cannot all
        # fit, so the scheduler preempts the newest and recomputes it later.
        shot(
            a.binary,
            browser,
            ["--max-model-len", "256", "--max-num-seqs", "8", "--kv-mem", "11059200"],
            os.path.join(a.out, "page-preemption.png"),
            "return document.querySelectorAll('tr[data-state=preempted]').length > 0",
            "a preempted sequence",
            max_tokens=96,
            stagger=0.0,
            settle=0.3,
        )
    finally:
        browser.close()


if __name__ == "__main__":
    main()
