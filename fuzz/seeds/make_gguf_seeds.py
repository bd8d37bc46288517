#!/usr/bin/env python3
"""Write small valid GGUF seeds for the gguf_header fuzz target from a real GGUF.

Usage: make_gguf_seeds.py SRC.gguf OUT.gguf

Keeps SRC's metadata (every key, in order), with each array cut to its first 16 elements
(the vocabulary, merges, scores), and replaces the tensors with a few tiny ones of the
model's names and types F32, F16 and Q4_0, so the file is whole (header, padding, data) and
a few KB. Only the Python standard library; the GGUF layout is the spec's (ggml docs/gguf.md).
"""
import struct
import sys

KEEP = 16
FIXED = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
STRING, ARRAY = 8, 9


class Reader:
    def __init__(self, f):
        self.f = f

    def take(self, fmt):
        size = struct.calcsize(fmt)
        return struct.unpack(fmt, self.f.read(size))[0]

    def string(self):
        return self.f.read(self.take("<Q"))

    def value(self, ty):
        if ty in FIXED:
            return self.take(FIXED[ty])
        if ty == STRING:
            return self.string()
        if ty == ARRAY:
            elem = self.take("<I")
            count = self.take("<Q")
            return (elem, [self.value(elem) for _ in range(count)])
        raise ValueError(f"unknown value type {ty}")


def put_string(out, b):
    out += struct.pack("<Q", len(b)) + b


def put_value(out, ty, v):
    if ty in FIXED:
        out += struct.pack(FIXED[ty], v)
    elif ty == STRING:
        put_string(out, v)
    else:
        elem, items = v
        items = items[:KEEP]
        out += struct.pack("<IQ", elem, len(items))
        for item in items:
            put_value(out, elem, item)


def main(src, dst):
    with open(src, "rb") as f:
        r = Reader(f)
        assert f.read(4) == b"GGUF", "not a GGUF file"
        version = r.take("<I")
        n_tensors = r.take("<Q")
        n_kv = r.take("<Q")
        meta = []
        for _ in range(n_kv):
            key = r.string()
            ty = r.take("<I")
            meta.append((key, ty, r.value(ty)))
    del n_tensors
    # name, dims (ggml order), ggml type, bytes
    tensors = [
        (b"token_embd.weight", [32, KEEP], 2, KEEP * 18),  # Q4_0: 18 bytes per 32 values
        (b"output_norm.weight", [32], 0, 32 * 4),  # F32
        (b"blk.0.attn_norm.weight", [32], 1, 32 * 2),  # F16
    ]
    out = bytearray(b"GGUF")
    out += struct.pack("<IQQ", version, len(tensors), len(meta))
    for key, ty, v in meta:
        put_string(out, key)
        out += struct.pack("<I", ty)
        put_value(out, ty, v)
    offset = 0
    for name, dims, ty, size in tensors:
        put_string(out, name)
        out += struct.pack("<I", len(dims))
        out += b"".join(struct.pack("<Q", d) for d in dims)
        out += struct.pack("<IQ", ty, offset)
        offset += (size + 31) // 32 * 32
    out += bytes(-len(out) % 32)
    for _, _, _, size in tensors:
        out += bytes(size) + bytes(-size % 32)
    with open(dst, "wb") as f:
        f.write(out)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
