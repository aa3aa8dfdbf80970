#!/usr/bin/env python3
"""Write the small model files of tests/data that the embed-inspect, generate and sample
golden tests read (models, tokenizer.bin, logits).

Standard library only, written independently of lmpipe's own writers so that the tests
read files lmpipe did not write. Deterministic: the same bytes on every run.
Usage: scripts/make_test_models.py [OUT_DIR]   (default tests/data)
"""
import json
import random
import struct
import sys
from pathlib import Path

out = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).resolve().parent.parent / "tests" / "data")
rng = random.Random(20261129)
TOKENS = ["<unk>", "<s>", "</s>", "▁the", "▁cat", "▁sat", "▁on", "▁mat", "s", "▁dog", "▁dogs", "."]
V = len(TOKENS)


def rand(n, scale=1.0):
    return [rng.gauss(0.0, 1.0) * scale for _ in range(n)]


def embedding(dim):
    rows = [rand(dim) for _ in range(V)]
    rows[10] = list(rows[9])                 # a duplicate row: ▁dogs = ▁dog
    rows[0] = [0.0] * dim                    # <unk>: never trained, all zero
    rows[8] = [x * 0.01 for x in rows[8]]    # a tiny norm
    rows[1] = [x * 2.0 for x in rows[4]]     # parallel to ▁cat, twice as long
    return rows


def f32(values):
    return struct.pack(f"<{len(values)}f", *values)


def llama2c(path, shared):
    dim, hidden, layers, heads, kv_heads, seq = 8, 16, 1, 2, 1, 4
    kv = dim * kv_heads // heads
    hs = dim // heads
    blob = struct.pack("<7i", dim, hidden, layers, heads, kv_heads, V if shared else -V, seq)
    rows = embedding(dim)
    blob += f32([x for r in rows for x in r])
    for n in [layers * dim, layers * dim * dim, layers * dim * kv, layers * dim * kv, layers * dim * dim,
              layers * dim, layers * hidden * dim, layers * dim * hidden, layers * hidden * dim, dim,
              seq * hs // 2, seq * hs // 2]:
        blob += f32(rand(n, 0.1))
    if not shared:
        blob += f32(rand(V * dim, 0.1))
    path.write_bytes(blob)


def llama2c_tokenizer(path):
    blob = struct.pack("<I", max(len(t.encode()) for t in TOKENS))
    for i, t in enumerate(TOKENS):
        b = t.encode()
        blob += struct.pack("<fi", -float(i), len(b)) + b
    path.write_bytes(blob)


def f16(values):
    return struct.pack(f"<{len(values)}e", *values)


def gguf_str(s):
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


def gguf(path):
    dim = 32
    kv = [
        ("general.architecture", 8, gguf_str("llama")),
        ("general.alignment", 4, struct.pack("<I", 64)),
        ("llama.embedding_length", 4, struct.pack("<I", dim)),
        ("llama.block_count", 10, struct.pack("<Q", 1)),
        ("llama.rope.freq_base", 6, struct.pack("<f", 10000.0)),
        ("test.i8", 1, struct.pack("<b", -5)),
        ("test.bool", 7, struct.pack("<B", 1)),
        ("test.f64", 12, struct.pack("<d", 0.25)),
        ("test.nested", 9, struct.pack("<IQ", 9, 2) + struct.pack("<IQ", 5, 2) + struct.pack("<2i", 1, -2)
         + struct.pack("<IQ", 5, 1) + struct.pack("<i", 3)),
        ("tokenizer.ggml.model", 8, gguf_str("llama")),
        ("tokenizer.ggml.tokens", 9, struct.pack("<IQ", 8, V) + b"".join(gguf_str(t) for t in TOKENS)),
        ("tokenizer.ggml.scores", 9, struct.pack("<IQ", 6, V) + struct.pack(f"<{V}f", *[-float(i) for i in range(V)])),
    ]
    rows = embedding(dim)
    tensors = [("token_embd.weight", 1, [dim, V], f16([x for r in rows for x in r])),  # ggml order: ne0 = dim
               ("output_norm.weight", 0, [dim], f32([1.0] * dim))]
    head = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kv))
    for k, t, v in kv:
        head += gguf_str(k) + struct.pack("<I", t) + v
    align, off, data = 64, 0, b""
    for name, t, ne, blob in tensors:
        head += gguf_str(name) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<Q", n) for n in ne)
        head += struct.pack("<IQ", t, off)
        pad = (-len(blob)) % align
        data += blob + b"\0" * pad
        off += len(blob) + pad
    head += b"\0" * ((-len(head)) % align)
    path.write_bytes(head + data)


def safetensors(path):
    dim = 8
    rows = embedding(dim)
    emb = f32([x for r in rows for x in r])
    head = rand(V * dim, 0.1)
    lm = f32(head)
    header = {"__metadata__": {"format": "pt"},
              "model.embed_tokens.weight": {"dtype": "F32", "shape": [V, dim], "data_offsets": [0, len(emb)]},
              "lm_head.weight": {"dtype": "F32", "shape": [V, dim], "data_offsets": [len(emb), len(emb) + len(lm)]}}
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((-len(h)) % 8)
    path.write_bytes(struct.pack("<Q", len(h)) + h + emb + lm)


def npy_bytes(descr, shape, payload):
    dims = "(%s)" % (", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else ""))
    header = "{'descr': '%s', 'fortran_order': False, 'shape': %s, }" % (descr, dims)
    header += " " * ((-(len(header) + 11)) % 64) + "\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode() + payload


def npy(path):
    dim = 8
    rows = embedding(dim)
    path.write_bytes(npy_bytes("<f4", (V, dim), f32([x for r in rows for x in r])))


def logits(out):
    row = [1.0, 2.0, 3.0, 0.5, -1.0, 3.0]
    rows = [[0.0, 1.0, 2.0, 3.0, 4.0, 5.0], [5.0, 4.0, 3.0, 2.0, 1.0, 0.0], [1.0] * 6]
    flat = [x for r in rows for x in r]
    (out / "logits6.npy").write_bytes(npy_bytes("<f4", (6,), f32(row)))
    (out / "logits3x6.npy").write_bytes(npy_bytes("<f4", (3, 6), f32(flat)))
    (out / "logits3x6_f16.npy").write_bytes(npy_bytes("<f2", (3, 6), f16(flat)))
    (out / "logits_nan.npy").write_bytes(npy_bytes("<f4", (6,), f32([1.0, float("nan"), 2.0, 0.0, 0.0, 0.0])))
    (out / "logits_i32.npy").write_bytes(npy_bytes("<i4", (6,), struct.pack("<6i", *range(6))))
    (out / "logits_3d.npy").write_bytes(npy_bytes("<f4", (1, 2, 6), f32([0.0] * 12)))
    (out / "logits_stream.npy").write_bytes(npy_bytes("<f4", (6,), f32(rows[0])) + npy_bytes("<f4", (2, 6), f32(flat[6:])))
    (out / "logits_ragged.npy").write_bytes(npy_bytes("<f4", (6,), f32([0.0] * 6)) + npy_bytes("<f4", (2, 7), f32([0.0] * 14)))


out.mkdir(parents=True, exist_ok=True)
llama2c(out / "tiny_llama2c.bin", shared=True)
llama2c(out / "tiny_llama2c_untied.bin", shared=False)
llama2c_tokenizer(out / "tiny_llama2c_tok.bin")
gguf(out / "tiny.gguf")
safetensors(out / "tiny.safetensors")
npy(out / "tiny_emb.npy")
logits(out)
