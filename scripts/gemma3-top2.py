#!/usr/bin/env python3
"""Record llama.cpp's teacher-forced top-2 for the real Gemma 3 270M, once, as a fixture.

Reads the logits file `llama-perplexity --kl-divergence-base FILE` writes (llama.cpp
tools/perplexity/perplexity.cpp: "_logits_", n_ctx, n_vocab, n_chunk as int32, the
n_chunk * n_ctx tokens, then per scored position 4 uint16 holding two f32 (scale,
min_log_prob) and n_vocab uint16 q with logit - min_logit = q * scale), and writes, per
scored position, llama.cpp's top-1 id, top-2 id and their logit margin.

Made with (llama.cpp from the llama-cpp-python 0.3.36 sdist, scripts/build-llama-cpp.sh):
  llama-perplexity -m ~/.cache/nanollm/gemma-3-270m-q4_k_m.gguf \
      -f assets/pride-and-prejudice-ch1-2.txt -c 1024 --chunks 1 -b 1024 -fa off -t 2 \
      --kl-divergence-base /tmp/gemma.kld
  python3 scripts/gemma3-top2.py /tmp/gemma.kld tests/fixtures/gemma3/llama-top2.json
(numpy: ~/.cache/nanollm/llama-1b-venv/bin/python3 has it.)
"""
import json
import sys

import numpy as np


def main(src, dst):
    raw = open(src, "rb").read()
    assert raw[:8] == b"_logits_", "not a llama-perplexity logits file"
    n_ctx, n_vocab, n_chunk = np.frombuffer(raw, dtype="<i4", count=3, offset=8)
    at = 8 + 12
    tokens = np.frombuffer(raw, dtype="<i4", count=n_chunk * n_ctx, offset=at)
    at += 4 * n_chunk * n_ctx
    nv = 2 * ((n_vocab + 1) // 2) + 4
    first = n_ctx // 2
    scored = n_ctx - 1 - first
    rows = np.frombuffer(raw, dtype="<u2", count=n_chunk * scored * nv, offset=at)
    rows = rows.reshape(n_chunk * scored, nv)
    top = []
    for r in rows:
        scale = float(np.frombuffer(r[:2].tobytes(), dtype="<f4")[0])
        q = r[4 : 4 + n_vocab].astype(np.int64)
        two = np.argsort(q)[-2:][::-1]
        top.append([int(two[0]), int(two[1]), round((int(q[two[0]]) - int(q[two[1]])) * scale, 5)])
    doc = {
        "made_by": "scripts/gemma3-top2.py from llama-perplexity --kl-divergence-base (llama.cpp of llama-cpp-python 0.3.36, 2 threads, f16 KV, -fa off)",
        "model_sha256": "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
        "text": "assets/pride-and-prejudice-ch1-2.txt",
        "ctx": int(n_ctx),
        "chunks": int(n_chunk),
        "first_scored": int(first),
        "tokens": [int(t) for t in tokens],
        "top2": top,
    }
    with open(dst, "w") as f:
        json.dump(doc, f, separators=(",", ":"))
        f.write("\n")
    print(f"{dst}: {len(top)} positions, margins > 0.1 at {sum(1 for t in top if t[2] > 0.1)}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
