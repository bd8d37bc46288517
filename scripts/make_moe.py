"""Write a random-weight qwen3moe or gpt-oss GGUF of a given shape, for tests against
llama.cpp and speed.

Shapes (qwen3moe): `qwen3-30b-a3b` is Qwen3-30B-A3B's config.json (hidden 2048, 32 query /
4 KV heads, head_dim 128, 128 experts of 768, 8 per token, 48 layers, untied LM head);
`small` runs in seconds (hidden 256, 8 / 2 heads of 64, 8 experts of 128, 2 per token, 4
layers). Shapes (gpt-oss): `gpt-oss-20b` is gpt-oss-20b's config.json (hidden 2880, 64 / 8
heads of 64, 32 experts of 2880, 4 per token, 24 layers, sliding window 128 on every other
layer, YaRN factor 32 over 4,096 positions, RoPE base 150,000); `gpt-oss-small` (hidden 256,
4 / 2 heads of 64, 8 experts of 128, 2 per token, 4 layers, window 8 so short prompts slide).
gpt-oss's o200k vocabulary is not on the registries: its files use the same Qwen stand-in.
`--layers N` keeps the shape with fewer layers. The tokenizer.* keys are copied from
llama.cpp's ggml-vocab-qwen2.gguf (Qwen's BPE; Qwen3 uses the same). Matrices are normal
with std 1/sqrt(columns) (the token embedding std 1), so the logits are peaked enough for a
greedy comparison; norms are ones, biases and sinks normal with std 0.5. One generator per
tensor seeded from (seed, tensor index), written one tensor at a time, as F16 or Q8_0
(gguf-py's reference quantizer), gpt-oss's experts in MXFP4 with `--type mxfp4` (as the
model ships; the other matrices Q8_0).

Needs numpy and gguf-py (llama.cpp's gguf-py directory on PYTHONPATH).
Usage: make_moe.py --vocab ggml-vocab-qwen2.gguf --out FILE [--shape small] [--layers N]
       [--type f16|q8_0] [--seed N]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

try:
    import numpy as np
    import gguf
    from gguf import quants
except ImportError as e:
    print(f"error: {e} (numpy and llama.cpp's gguf-py on PYTHONPATH are needed)", file=sys.stderr)
    sys.exit(3)

SHAPES = {
    "gpt-oss-20b": dict(arch="gpt-oss", hidden=2880, heads=64, kv_heads=8, head_dim=64,
                        experts=32, used=4, expert_ff=2880, ff=2880, layers=24, ctx=131072,
                        theta=150000.0, eps=1e-5, window=128, yarn=(32.0, 4096)),
    "gpt-oss-small": dict(arch="gpt-oss", hidden=256, heads=4, kv_heads=2, head_dim=64,
                          experts=8, used=2, expert_ff=128, ff=128, layers=4, ctx=4096,
                          theta=150000.0, eps=1e-5, window=8, yarn=(32.0, 4096)),
    "qwen3-30b-a3b": dict(hidden=2048, heads=32, kv_heads=4, head_dim=128, experts=128, used=8,
                          expert_ff=768, ff=6144, layers=48, ctx=40960, theta=1e6, eps=1e-6),
    "small": dict(hidden=256, heads=8, kv_heads=2, head_dim=64, experts=8, used=2,
                  expert_ff=128, ff=512, layers=4, ctx=4096, theta=1e6, eps=1e-6),
}


def die(msg: str) -> None:
    print(f"error: {msg}", file=sys.stderr)
    sys.exit(3)


def plan(s: dict, vocab: int) -> list[tuple[str, tuple[int, ...], bool]]:
    """(name, numpy shape = ggml's ne reversed, is a matrix) in file order."""
    h, d, e, f = s["hidden"], s["head_dim"], s["experts"], s["expert_ff"]
    q, kv = s["heads"] * d, s["kv_heads"] * d
    out = [("token_embd.weight", (vocab, h), True)]
    if s.get("arch") == "gpt-oss":
        for i in range(s["layers"]):
            b = f"blk.{i}."
            out += [
                (b + "attn_norm.weight", (h,), False),
                (b + "attn_q.weight", (q, h), True),
                (b + "attn_q.bias", (q,), False),
                (b + "attn_k.weight", (kv, h), True),
                (b + "attn_k.bias", (kv,), False),
                (b + "attn_v.weight", (kv, h), True),
                (b + "attn_v.bias", (kv,), False),
                (b + "attn_output.weight", (h, q), True),
                (b + "attn_output.bias", (h,), False),
                (b + "attn_sinks.weight", (s["heads"],), False),
                (b + "post_attention_norm.weight", (h,), False),
                (b + "ffn_gate_inp.weight", (e, h), False),
                (b + "ffn_gate_inp.bias", (e,), False),
                (b + "ffn_gate_exps.weight", (e, f, h), True),
                (b + "ffn_gate_exps.bias", (e, f), False),
                (b + "ffn_up_exps.weight", (e, f, h), True),
                (b + "ffn_up_exps.bias", (e, f), False),
                (b + "ffn_down_exps.weight", (e, h, f), True),
                (b + "ffn_down_exps.bias", (e, h), False),
            ]
        out += [("output_norm.weight", (h,), False), ("output.weight", (vocab, h), True)]
        return out
    for i in range(s["layers"]):
        b = f"blk.{i}."
        out += [
            (b + "attn_norm.weight", (h,), False),
            (b + "attn_q.weight", (q, h), True),
            (b + "attn_k.weight", (kv, h), True),
            (b + "attn_v.weight", (kv, h), True),
            (b + "attn_output.weight", (h, q), True),
            (b + "attn_q_norm.weight", (d,), False),
            (b + "attn_k_norm.weight", (d,), False),
            (b + "ffn_norm.weight", (h,), False),
            (b + "ffn_gate_inp.weight", (e, h), False),
            (b + "ffn_gate_exps.weight", (e, f, h), True),
            (b + "ffn_up_exps.weight", (e, f, h), True),
            (b + "ffn_down_exps.weight", (e, h, f), True),
        ]
    out += [("output_norm.weight", (h,), False), ("output.weight", (vocab, h), True)]
    return out


def tokenizer_fields(path: str) -> list:
    reader = gguf.GGUFReader(path, "r")
    fields = []
    for name, field in reader.fields.items():
        if not name.startswith("tokenizer."):
            continue
        vtype = field.types[0]
        sub = field.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None
        fields.append((name, field.contents(), vtype, sub))
    if not any(f[0] == "tokenizer.ggml.tokens" for f in fields):
        die(f"{path} has no tokenizer.ggml.tokens")
    return fields


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vocab", required=True, help="llama.cpp's models/ggml-vocab-qwen2.gguf")
    ap.add_argument("--out", required=True)
    ap.add_argument("--shape", choices=sorted(SHAPES), default="small")
    ap.add_argument("--layers", type=int)
    ap.add_argument("--type", choices=["f16", "q8_0", "mxfp4"], default="f16")
    ap.add_argument("--seed", type=int, default=57)
    ap.add_argument("--mxfp4-random", action="store_true",
                    help="with --type mxfp4: random MXFP4 blocks (scale bytes 121..123, any codes) "
                         "instead of gguf-py's quantizer, which takes hours at gpt-oss-20b's size")
    args = ap.parse_args()
    s = dict(SHAPES[args.shape])
    if args.type == "mxfp4" and s.get("arch") != "gpt-oss":
        die("--type mxfp4 is for the gpt-oss shapes (their experts ship in MXFP4)")
    if args.layers is not None:
        if not 1 <= args.layers <= s["layers"]:
            die(f"--layers must be 1 to {s['layers']}")
        s["layers"] = args.layers
    try:
        write(args, s)
    except OSError as e:
        die(f"writing {args.out}: {e}")


def write(args: argparse.Namespace, s: dict) -> None:
    start = time.monotonic()
    tok = tokenizer_fields(args.vocab)
    vocab = len(next(f[1] for f in tok if f[0] == "tokenizer.ggml.tokens"))
    q8 = args.type in ("q8_0", "mxfp4")
    arch = s.get("arch", "qwen3moe")
    w = gguf.GGUFWriter(args.out, arch)
    w.add_name(f"{args.shape} shape ({s['layers']} layers), random weights")
    w.add_context_length(s["ctx"])
    w.add_embedding_length(s["hidden"])
    w.add_block_count(s["layers"])
    w.add_feed_forward_length(s["ff"])
    w.add_head_count(s["heads"])
    w.add_head_count_kv(s["kv_heads"])
    w.add_key_length(s["head_dim"])
    w.add_value_length(s["head_dim"])
    w.add_rope_freq_base(s["theta"])
    w.add_layer_norm_rms_eps(s["eps"])
    w.add_expert_count(s["experts"])
    w.add_expert_used_count(s["used"])
    w.add_expert_feed_forward_length(s["expert_ff"])
    if "window" in s:
        w.add_sliding_window(s["window"])
        factor, original = s["yarn"]
        w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
        w.add_rope_scaling_factor(factor)
        w.add_rope_scaling_orig_ctx_len(original)
    w.add_file_type({"f16": gguf.LlamaFileType.MOSTLY_F16, "q8_0": gguf.LlamaFileType.MOSTLY_Q8_0,
                     "mxfp4": gguf.LlamaFileType.MOSTLY_MXFP4_MOE}[args.type])
    for name, value, vtype, sub in tok:
        w.add_key_value(name, value, vtype, sub_type=sub)
    tensors = plan(s, vocab)
    q8_type = gguf.GGMLQuantizationType.Q8_0
    mx_type = gguf.GGMLQuantizationType.MXFP4
    mxfp4 = lambda name: args.type == "mxfp4" and name.endswith("_exps.weight")
    for name, shape, matrix in tensors:
        n = int(np.prod(shape))
        if matrix and mxfp4(name):
            w.add_tensor_info(name, quants.quant_shape_to_byte_shape(shape, mx_type), np.dtype(np.uint8),
                              n // 32 * 17, raw_dtype=mx_type)
        elif matrix and q8:
            w.add_tensor_info(name, quants.quant_shape_to_byte_shape(shape, q8_type), np.dtype(np.uint8),
                              n // 32 * 34, raw_dtype=q8_type)
        elif matrix:
            w.add_tensor_info(name, shape, np.dtype(np.float16), n * 2)
        else:
            w.add_tensor_info(name, shape, np.dtype(np.float32), n * 4)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    fout = w.fout[0]
    for i, (name, shape, matrix) in enumerate(tensors):
        rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence([args.seed, i])))
        if name.endswith("ffn_gate_inp.weight"):
            t = rng.standard_normal(shape, dtype=np.float32) * np.float32(2.0 / np.sqrt(shape[-1]))
        elif name.endswith(".bias") or name.endswith("attn_sinks.weight"):
            t = rng.standard_normal(shape, dtype=np.float32) * np.float32(0.5)
        elif not matrix:
            t = np.ones(shape, dtype=np.float32)
        elif mxfp4(name) and args.mxfp4_random:
            n_blocks = int(np.prod(shape)) // 32
            t = rng.integers(0, 256, (n_blocks, 17), dtype=np.uint8)
            t[:, 0] = rng.integers(121, 124, n_blocks, dtype=np.uint8)
            t = t.reshape(quants.quant_shape_to_byte_shape(shape, mx_type))
        else:
            std = 1.0 if name == "token_embd.weight" else 1.0 / np.sqrt(shape[-1])
            x = rng.standard_normal(shape, dtype=np.float32) * np.float32(std)
            if mxfp4(name):
                t = quants.quantize(x, mx_type)
            else:
                t = quants.quantize(x, q8_type) if q8 else x.astype(np.float16)
            del x
        w.write_tensor_data(t)
        del t
    fout.flush()
    size = fout.tell()
    w.close()
    n = sum(int(np.prod(sh)) for _, sh, _ in tensors)
    print(f"wrote {args.out}: {len(tensors)} tensors, {n} parameters, {size} bytes in "
          f"{time.monotonic() - start:.0f} s", file=sys.stderr)


if __name__ == "__main__":
    main()
