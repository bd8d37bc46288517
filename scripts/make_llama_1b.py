"""Write a random-weight F16 GGUF of Llama-3.2-1B's shape, for scripts/make-llama-1b.sh.

Hyperparameters and tensor names/shapes are Llama-3.2-1B's as llama.cpp's converter writes
them (tied embeddings: no output.weight). The tokenizer.* keys are copied, types and all,
from llama.cpp's ggml-vocab-llama-bpe.gguf (Llama 3's BPE vocabulary). Matrices are F16,
normal with std 0.02, one generator per tensor seeded from (seed, tensor index), so the file
is the same bytes on every run with the same numpy; norm weights are F32 ones. Tensors are
made and written one at a time (the largest, token_embd, peaks at ~1.6 GB of memory).

Needs numpy and gguf-py (llama.cpp's gguf-py directory on PYTHONPATH).
Usage: make_llama_1b.py --vocab ggml-vocab-llama-bpe.gguf --out FILE [--seed N]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

try:
    import numpy as np
    import gguf
except ImportError as e:
    print(f"error: {e} (numpy and llama.cpp's gguf-py on PYTHONPATH are needed)", file=sys.stderr)
    sys.exit(3)

# Llama-3.2-1B (config.json of meta-llama/Llama-3.2-1B).
N_VOCAB = 128256
N_EMBD = 2048
N_LAYER = 16
N_HEAD = 32
N_HEAD_KV = 8
N_FF = 8192
N_CTX = 131072
ROPE_FREQ_BASE = 500000.0
RMS_EPS = 1e-5
HEAD_DIM = N_EMBD // N_HEAD  # 64
STD = 0.02


def die(msg: str) -> None:
    """One error line, and exit status 3: make-llama-1b.sh adds no line of its own."""
    print(f"error: {msg}", file=sys.stderr)
    sys.exit(3)


def tensors() -> list[tuple[str, tuple[int, ...], type]]:
    """(name, numpy shape (rows, cols) = ggml's (ne1, ne0) reversed, dtype), in file order."""
    kv = N_HEAD_KV * HEAD_DIM
    out: list[tuple[str, tuple[int, ...], type]] = [("token_embd.weight", (N_VOCAB, N_EMBD), np.float16)]
    for i in range(N_LAYER):
        b = f"blk.{i}."
        out += [
            (b + "attn_norm.weight", (N_EMBD,), np.float32),
            (b + "attn_q.weight", (N_HEAD * HEAD_DIM, N_EMBD), np.float16),
            (b + "attn_k.weight", (kv, N_EMBD), np.float16),
            (b + "attn_v.weight", (kv, N_EMBD), np.float16),
            (b + "attn_output.weight", (N_EMBD, N_HEAD * HEAD_DIM), np.float16),
            (b + "ffn_norm.weight", (N_EMBD,), np.float32),
            (b + "ffn_gate.weight", (N_FF, N_EMBD), np.float16),
            (b + "ffn_up.weight", (N_FF, N_EMBD), np.float16),
            (b + "ffn_down.weight", (N_EMBD, N_FF), np.float16),
        ]
    out.append(("output_norm.weight", (N_EMBD,), np.float32))
    return out


def tokenizer_fields(path: str) -> list[tuple[str, object, gguf.GGUFValueType, gguf.GGUFValueType | None]]:
    """Every tokenizer.* key of the GGUF at path, as (key, value, type, array element type)."""
    reader = gguf.GGUFReader(path, "r")
    fields = []
    for name, field in reader.fields.items():
        if not name.startswith("tokenizer."):
            continue
        vtype = field.types[0]
        sub = field.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None
        if vtype == gguf.GGUFValueType.ARRAY and len(field.types) != 2:
            die(f"{path}: {name} is a nested array, which this script does not copy")
        fields.append((name, field.contents(), vtype, sub))
    got = {f[0]: f[1] for f in fields}
    if got.get("tokenizer.ggml.pre") != "llama-bpe" or len(got.get("tokenizer.ggml.tokens", [])) != N_VOCAB:
        die(f"{path} is not llama.cpp's Llama 3 vocabulary (tokenizer.ggml.pre llama-bpe, {N_VOCAB} tokens)")
    return fields


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vocab", required=True, help="llama.cpp's models/ggml-vocab-llama-bpe.gguf")
    ap.add_argument("--out", required=True, help="the F16 GGUF to write")
    ap.add_argument("--seed", type=int, default=20240925)
    args = ap.parse_args()
    try:
        write(args)
    except OSError as e:  # a full disk or an unreadable file: one line, not a traceback
        die(f"writing {args.out} (tokenizer from {args.vocab}): {e}")


def write(args: argparse.Namespace) -> None:
    start = time.monotonic()
    tok = tokenizer_fields(args.vocab)

    w = gguf.GGUFWriter(args.out, "llama")
    w.add_name("Llama-3.2-1B shape, random weights")
    w.add_description("Random weights (normal, std 0.02) in Llama-3.2-1B's shape, for speed and memory benchmarks; its output is noise")
    w.add_context_length(N_CTX)
    w.add_embedding_length(N_EMBD)
    w.add_block_count(N_LAYER)
    w.add_feed_forward_length(N_FF)
    w.add_head_count(N_HEAD)
    w.add_head_count_kv(N_HEAD_KV)
    w.add_rope_freq_base(ROPE_FREQ_BASE)
    w.add_layer_norm_rms_eps(RMS_EPS)
    w.add_rope_dimension_count(HEAD_DIM)
    w.add_vocab_size(N_VOCAB)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    for name, value, vtype, sub in tok:
        w.add_key_value(name, value, vtype, sub_type=sub)

    plan = tensors()
    for name, shape, dtype in plan:
        nbytes = int(np.prod(shape)) * np.dtype(dtype).itemsize
        w.add_tensor_info(name, shape, np.dtype(dtype), nbytes)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()

    assert w.fout is not None
    fout = w.fout[0]
    for i, (name, shape, dtype) in enumerate(plan):
        if dtype == np.float32:
            t = np.ones(shape, dtype=np.float32)
        else:
            rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence([args.seed, i])))
            x = rng.standard_normal(shape, dtype=np.float32)
            x *= STD
            t = x.astype(np.float16)
            del x
        fout.flush()
        w.write_tensor_data(t)
        del t
        if name.endswith("ffn_down.weight") or name == "token_embd.weight":
            print(f"  {name} written ({time.monotonic() - start:.0f} s)", file=sys.stderr, flush=True)
    fout.flush()
    os.fsync(fout.fileno())
    size = fout.tell()
    w.close()
    if os.path.getsize(args.out) != size:
        die(f"{args.out} is {os.path.getsize(args.out)} bytes, expected {size} (disk full?)")
    n = sum(int(np.prod(s)) for _, s, _ in plan)
    print(f"wrote {args.out}: {len(plan)} tensors, {n} parameters, {size} bytes in {time.monotonic() - start:.0f} s",
          file=sys.stderr)


if __name__ == "__main__":
    main()
