"""Write a random-weight qwen3moe, gpt-oss or deepseek2 GGUF of a given shape, for tests
against llama.cpp and speed.

Shapes (qwen3moe): `qwen3-30b-a3b` is Qwen3-30B-A3B's config.json (hidden 2048, 32 query /
4 KV heads, head_dim 128, 128 experts of 768, 8 per token, 48 layers, untied LM head);
`small` runs in seconds (hidden 256, 8 / 2 heads of 64, 8 experts of 128, 2 per token, 4
layers). Shapes (gpt-oss): `gpt-oss-20b` is gpt-oss-20b's config.json (hidden 2880, 64 / 8
heads of 64, 32 experts of 2880, 4 per token, 24 layers, sliding window 128 on every other
layer, YaRN factor 32 over 4,096 positions, RoPE base 150,000); `gpt-oss-small` (hidden 256,
4 / 2 heads of 64, 8 experts of 128, 2 per token, 4 layers, window 8 so short prompts slide).
gpt-oss's o200k vocabulary is not on the registries: its files use the same Qwen stand-in.
Shapes (deepseek2, multi-head latent attention in llama.cpp's converter's current layout: K/V
compressed to kv_lora_rank plus one shared RoPE key, the up-projection split into per-head
attn_k_b / attn_v_b, so the KV cache holds kv_lora_rank + qk_rope values a token and layer):
`deepseek-v2-lite` is DeepSeek-V2-Lite's config.json (hidden 2048, 16 heads, no q LoRA,
kv_lora_rank 512, qk_nope 128 + qk_rope 64, v_head 128, 27 layers of which the first is a dense
FFN of 10,944, then 64 routed experts of 1,408 + 2 shared, 6 per token, softmax gating
without renormalisation, scale 1.0, RoPE base 10,000 with YaRN factor 40 over 4,096 positions,
mscale_all_dim 0.707); `deepseek2-small` runs in seconds (hidden 256, 4 heads, kv_lora 64,
nope 32 + rope 32, v_head 32, 4 layers, 1 dense of 512, 8 experts of 128 + 1 shared, 2 per
token, softmax, no YaRN); `deepseek3-small` is deepseek2-small with DeepSeek-V3's routing
and a q LoRA (q_lora_rank 96, sigmoid gating with an exp_probs_b bias, renormalised top-k,
scale 2.5, 2 expert groups, 1 used).
DeepSeek's own 102,400-token vocabulary is replaced by the same Qwen stand-in (vocab_size says so).
llama.cpp reads attention.q_lora_rank unless the model has 26 or 27 layers (its "lite" guess), so
a shape without a q LoRA gets q_lora_rank 0 at any other depth (the converter writes no key).
`--layers N` keeps the shape with fewer layers. The tokenizer.* keys are copied from
llama.cpp's ggml-vocab-qwen2.gguf (Qwen's BPE; Qwen3 uses the same). Matrices are normal
with std 1/sqrt(columns) (the token embedding std 1), so the logits are peaked enough for a
greedy comparison; norms are ones, biases (exp_probs_b too) and sinks normal with std 0.5.
One generator per tensor seeded from (seed, tensor index), written one tensor at a time, as
F16 or Q8_0 (gguf-py's reference quantizer), gpt-oss's experts in MXFP4 with `--type mxfp4`
(as the model ships; the other matrices Q8_0).

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
    # deepseek2: q_lora 0 = no q LoRA; gating 1 softmax, 2 sigmoid (with exp_probs_b);
    # groups (count, used) written only when count > 1; yarn (factor, original context,
    # mscale_all_dim, beta_fast, beta_slow).
    "deepseek-v2-lite": dict(arch="deepseek2", hidden=2048, heads=16, q_lora=0, kv_lora=512,
                             nope=128, rope=64, v_head=128, ff=10944, dense=1, experts=64,
                             used=6, shared=2, expert_ff=1408, gating=1, norm=False,
                             scale=1.0, groups=(1, 1), layers=27, ctx=163840, theta=10000.0,
                             eps=1e-6, yarn=(40.0, 4096, 0.707, 32.0, 1.0)),
    "deepseek2-small": dict(arch="deepseek2", hidden=256, heads=4, q_lora=0, kv_lora=64, nope=32,
                            rope=32, v_head=32, ff=512, dense=1, experts=8, used=2, shared=1,
                            expert_ff=128, gating=1, norm=False, scale=1.0, groups=(1, 1),
                            layers=4, ctx=4096, theta=10000.0, eps=1e-6),
    "deepseek3-small": dict(arch="deepseek2", hidden=256, heads=4, q_lora=96, kv_lora=64, nope=32,
                            rope=32, v_head=32, ff=512, dense=1, experts=8, used=2, shared=1,
                            expert_ff=128, gating=2, norm=True, scale=2.5, groups=(2, 1),
                            layers=4, ctx=4096, theta=10000.0, eps=1e-6),
}


def die(msg: str) -> None:
    print(f"error: {msg}", file=sys.stderr)
    sys.exit(3)


def plan_deepseek2(s: dict, vocab: int) -> list[tuple[str, tuple[int, ...], bool]]:
    """deepseek2's tensors as llama.cpp's converter writes them (split attn_k_b / attn_v_b)."""
    h, n, e, f = s["hidden"], s["heads"], s["experts"], s["expert_ff"]
    ql, kvl, nope, rope, vh = s["q_lora"], s["kv_lora"], s["nope"], s["rope"], s["v_head"]
    out = [("token_embd.weight", (vocab, h), True)]
    for i in range(s["layers"]):
        b = f"blk.{i}."
        out.append((b + "attn_norm.weight", (h,), False))
        if ql:
            out += [
                (b + "attn_q_a.weight", (ql, h), True),
                (b + "attn_q_a_norm.weight", (ql,), False),
                (b + "attn_q_b.weight", (n * (nope + rope), ql), True),
            ]
        else:
            out.append((b + "attn_q.weight", (n * (nope + rope), h), True))
        out += [
            (b + "attn_kv_a_mqa.weight", (kvl + rope, h), True),
            (b + "attn_kv_a_norm.weight", (kvl,), False),
            (b + "attn_k_b.weight", (n, kvl, nope), True),
            (b + "attn_v_b.weight", (n, vh, kvl), True),
            (b + "attn_output.weight", (h, n * vh), True),
            (b + "ffn_norm.weight", (h,), False),
        ]
        if i < s["dense"]:
            out += [
                (b + "ffn_gate.weight", (s["ff"], h), True),
                (b + "ffn_up.weight", (s["ff"], h), True),
                (b + "ffn_down.weight", (h, s["ff"]), True),
            ]
            continue
        out.append((b + "ffn_gate_inp.weight", (e, h), False))
        if s["gating"] == 2:
            out.append((b + "exp_probs_b.bias", (e,), False))
        sh = f * s["shared"]
        out += [
            (b + "ffn_gate_exps.weight", (e, f, h), True),
            (b + "ffn_up_exps.weight", (e, f, h), True),
            (b + "ffn_down_exps.weight", (e, h, f), True),
            (b + "ffn_gate_shexp.weight", (sh, h), True),
            (b + "ffn_up_shexp.weight", (sh, h), True),
            (b + "ffn_down_shexp.weight", (h, sh), True),
        ]
    out += [("output_norm.weight", (h,), False), ("output.weight", (vocab, h), True)]
    return out


def plan(s: dict, vocab: int) -> list[tuple[str, tuple[int, ...], bool]]:
    """(name, numpy shape = ggml's ne reversed, is a matrix) in file order."""
    if s.get("arch") == "deepseek2":
        return plan_deepseek2(s, vocab)
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
    if arch == "deepseek2":
        deepseek2_keys(w, s, vocab)
    else:
        other_keys(w, s)
    w.add_file_type({"f16": gguf.LlamaFileType.MOSTLY_F16, "q8_0": gguf.LlamaFileType.MOSTLY_Q8_0,
                     "mxfp4": gguf.LlamaFileType.MOSTLY_MXFP4_MOE}[args.type])
    for name, value, vtype, sub in tok:
        w.add_key_value(name, value, vtype, sub_type=sub)
    write_tensors(args, w, plan(s, vocab), q8, start)


def deepseek2_keys(w: gguf.GGUFWriter, s: dict, vocab: int) -> None:
    """The keys DeepseekV2Model.set_gguf_parameters (llama.cpp's converter) writes."""
    w.add_block_count(s["layers"])
    w.add_context_length(s["ctx"])
    w.add_embedding_length(s["hidden"])
    w.add_feed_forward_length(s["ff"])
    w.add_head_count(s["heads"])
    w.add_head_count_kv(1)  # MLA is stored as MQA over the compressed latent
    yarn = s.get("yarn")
    if yarn:
        factor, original, mscale_all_dim, beta_fast, beta_slow = yarn
        w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
        w.add_rope_scaling_factor(factor)
        w.add_rope_scaling_orig_ctx_len(original)
        w.add_rope_scaling_yarn_beta_fast(beta_fast)
        w.add_rope_scaling_yarn_beta_slow(beta_slow)
    w.add_rope_freq_base(s["theta"])
    w.add_layer_norm_rms_eps(s["eps"])
    w.add_expert_count(s["experts"])
    w.add_expert_used_count(s["used"])
    groups, groups_used = s["groups"]
    if groups > 1:
        w.add_expert_group_count(groups)
        w.add_expert_group_used_count(groups_used)
    w.add_expert_gating_func(gguf.ExpertGatingFuncType.SIGMOID if s["gating"] == 2
                             else gguf.ExpertGatingFuncType.SOFTMAX)
    w.add_leading_dense_block_count(s["dense"])
    w.add_vocab_size(vocab)
    if s["q_lora"]:
        w.add_q_lora_rank(s["q_lora"])
    elif s["layers"] not in (26, 27):
        w.add_q_lora_rank(0)  # llama.cpp requires the key unless it guesses a "lite" model
    w.add_kv_lora_rank(s["kv_lora"])
    w.add_key_length(s["kv_lora"] + s["rope"])
    w.add_value_length(s["kv_lora"])
    w.add_key_length_mla(s["nope"] + s["rope"])
    w.add_value_length_mla(s["v_head"])
    w.add_expert_feed_forward_length(s["expert_ff"])
    w.add_expert_shared_count(s["shared"])
    w.add_expert_weights_scale(s["scale"])
    if s["norm"]:
        w.add_expert_weights_norm(True)
    w.add_rope_dimension_count(s["rope"])
    if yarn:
        w.add_rope_scaling_yarn_log_mul(0.1 * yarn[2])  # the converter's legacy factor 0.1


def other_keys(w: gguf.GGUFWriter, s: dict) -> None:
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


def write_tensors(args: argparse.Namespace, w: gguf.GGUFWriter, tensors: list, q8: bool,
                  start: float) -> None:
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
