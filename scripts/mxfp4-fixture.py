#!/usr/bin/env python3
"""Write tests/fixtures/mxfp4/gguf-py-dequantize.json: 40 MXFP4 blocks (every edge scale byte:
0, 1, 2 (the subnormal and first normal scales), 127, 128, 254, 255, and random codes) and
gguf-py's dequantization of them, the f32 bits of each value, the oracle of
kernels/matmul/mxfp4.rs. Needs numpy and gguf-py (PYTHONPATH=vendor/llama.cpp/gguf-py).
"""
import json, sys
import numpy as np
from gguf import quants, GGMLQuantizationType as T
rng = np.random.default_rng(39)
es = [0, 1, 2, 3, 64, 100, 120, 126, 127, 128, 129, 130, 140, 200, 253, 254, 255]
es += list(rng.integers(100, 140, 40 - len(es)))
blocks = []
for e in es:
    blocks.append(bytes([int(e)]) + bytes(rng.integers(0, 256, 16, dtype=np.uint8)))
raw = np.frombuffer(b"".join(blocks), dtype=np.uint8).reshape(1, len(blocks) * 17)
vals = quants.dequantize(raw, T.MXFP4).astype(np.float32).reshape(-1)
bits = vals.view(np.uint32)
out = {"made_by": "gguf-py (llama.cpp from the llama-cpp-python 0.3.36 sdist) quants.dequantize(MXFP4)",
       "blocks": [b.hex() for b in blocks],
       "values": ["".join(f"{int(x):08x}" for x in bits[i * 32:(i + 1) * 32]) for i in range(len(blocks))]}
json.dump(out, open(sys.argv[1], "w"), indent=0)
