#!/usr/bin/env python3
"""Record llama.cpp's greedy tokens and top-2 log-probabilities on a tiny GGUF the tests
write, as a fixture the tests read (named record-gpt-oss.py until it served the other
mixtures of experts too):

  NANOLLM_GPT_OSS_OUT=/tmp/gpt-oss-tiny cargo test --release --test hf_models -- \
      --ignored write_tiny_gpt_oss_for_the_fixture
  scripts/record-llama-top2.py /tmp/gpt-oss-tiny.gguf tests/fixtures/gpt_oss/llama-greedy.json

  NANOLLM_MOE_OUT=/tmp/moe-tiny cargo test --release --test hf_models -- \
      --ignored write_tiny_moe_for_the_fixture
  scripts/record-llama-top2.py /tmp/moe-tiny-qwen3moe.gguf \
      tests/fixtures/moe/llama-greedy-qwen3moe.json 10,25,47,8,63,33,31,12,55

The optional third argument is the prompt's token ids (default: the gpt-oss fixture's).
llama-server (llama.cpp from the llama-cpp-python 0.3.36 sdist, scripts/build-llama-cpp.sh)
on 2 threads, `/completion` with the prompt as token ids, temperature 0, top_k 1, n_probs 2
(log-probabilities before sampling), the end-of-text token ignored. Standard library only.
"""
import json
import os
import subprocess
import sys
import time
import urllib.request

PROMPT = [10, 25, 47, 8, 63, 90, 31, 12, 55]
STEPS = 24
PORT = 18473


def fnv1a(data: bytes) -> str:
    h = 0xCBF29CE484222325
    for b in data:
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"


def main(model: str, out: str, prompt: str = "") -> None:
    ids = [int(t) for t in prompt.split(",")] if prompt else PROMPT
    server = os.environ.get("LLAMA_SERVER", "vendor/llama.cpp/build/bin/llama-server")
    proc = subprocess.Popen([server, "-m", model, "-t", "2", "-c", "256", "--port", str(PORT),
                             "-np", "1", "--no-warmup"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        url = f"http://127.0.0.1:{PORT}"
        for _ in range(120):
            try:
                urllib.request.urlopen(url + "/health", timeout=1)
                break
            except Exception:
                time.sleep(0.5)
        body = {"prompt": ids, "n_predict": STEPS, "ignore_eos": True, "temperature": 0, "top_k": 1,
                "n_probs": 2, "cache_prompt": False, "samplers": ["top_k"]}
        req = urllib.request.Request(url + "/completion", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        doc = json.load(urllib.request.urlopen(req, timeout=120))
    finally:
        proc.terminate()
        proc.wait()
    top2 = []
    for step in doc["completion_probabilities"]:
        top = step["top_logprobs"][:2]
        top2.append([[t["id"], t["logprob"]] for t in top])
    fixture = {"fnv1a": fnv1a(open(model, "rb").read()), "prompt": ids, "top2": top2,
               "made_by": "llama-server 0.3.36 (llama-cpp-python sdist), scripts/record-llama-top2.py"}
    rows = ",\n".join("  " + json.dumps(t) for t in top2)
    with open(out, "w") as f:
        f.write("{\n" + "".join(f' "{k}": {json.dumps(fixture[k])},\n' for k in ("fnv1a", "made_by", "prompt"))
                + f' "top2": [\n{rows}\n ]\n}}\n')
    print(f"{out}: {len(top2)} steps", file=sys.stderr)


if __name__ == "__main__":
    main(*sys.argv[1:4])
