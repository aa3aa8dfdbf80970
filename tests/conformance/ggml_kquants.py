# q4_1, q5_0, q5_1, the k-quants (q2_K … q6_K), iq4_nl and iq4_xs against GGML's own code, called from the libggml-base.so
# that llama.cpp's prebuilt npm package carries (ctypes; its quantize and dequantize_row
# functions). For each type, on matrices of several distributions:
#   1. GGML's blocks, put into a GGUF that lmpipe wrote, read back by lmpipe (embed-inspect
#      rows): the same floats as GGML's dequantize_row, bit for bit;
#   2. lmpipe's blocks (embed-inspect export --dtype), dequantized by GGML: the same floats
#      as lmpipe's reading of them, bit for bit;
#   3. lmpipe's quantization error (RMS, relative to the matrix's) at most 1.15x GGML's over
#      the matrix, and on no row over 1.5x GGML's (+ 0.002). (A row of numbers near 1e-6
#      loses everything in both: the super-block's f16 factors underflow.)
# usage: ggml_kquants.py BIN_DIR LIBGGML_BASE WORK_DIR
import ctypes, json, subprocess, sys
import numpy as np

bindir, libpath, work = sys.argv[1:4]
ei = f"{bindir}/embed-inspect"
lib = ctypes.CDLL(libpath)
lib.ggml_quantize_chunk.restype = ctypes.c_size_t
lib.ggml_quantize_chunk.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64,
                                    ctypes.c_int64, ctypes.c_void_p]
# ggml type id, numbers a block, bytes a block
TYPES = {"q4_1": (3, 32, 20), "q5_0": (6, 32, 22), "q5_1": (7, 32, 24), "q2_K": (10, 256, 84), "q3_K": (11, 256, 110), "q4_K": (12, 256, 144), "q5_K": (13, 256, 176),
         "q6_K": (14, 256, 210), "iq4_nl": (20, 32, 18), "iq4_xs": (23, 256, 136)}


def matrices():
    rng = np.random.default_rng(7)
    H = 1024
    rows = [rng.standard_normal(H), rng.laplace(size=H), rng.uniform(-1, 1, H), rng.uniform(0, 1, H),
            rng.uniform(-1, 0, H), np.zeros(H), np.full(H, 0.75), np.full(H, -2.5), rng.standard_normal(H) * 1e-6,
            rng.standard_normal(H) * 300]
    spiky = rng.standard_normal(H) * 0.02
    spiky[rng.integers(0, H, 12)] = rng.standard_normal(12) * 4
    rows.append(spiky)
    rows += [rng.standard_normal(H) * rng.uniform(0.01, 2) for _ in range(21)]
    return np.array(rows, dtype=np.float32)


def ggml_quantize(t, x):
    tid, block, bsize = TYPES[t]
    n, h = x.shape
    out = np.zeros(n * h // block * bsize, dtype=np.uint8)
    x = np.ascontiguousarray(x)
    got = lib.ggml_quantize_chunk(tid, x.ctypes.data, out.ctypes.data, 0, n, h, None)
    assert got == out.size, (got, out.size)
    return out


def ggml_dequantize(t, blocks, shape):
    fn = getattr(lib, f"dequantize_row_{t}")
    fn.restype = None
    fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
    y = np.zeros(shape, dtype=np.float32)
    blocks = np.ascontiguousarray(blocks)
    fn(blocks.ctypes.data, y.ctypes.data, y.size)
    return y


def run(*args):
    subprocess.run([ei, *args], check=True)


def tensor_span(gguf):
    meta = json.loads(subprocess.run([ei, "list", gguf, "--json"], check=True, capture_output=True, text=True).stdout)
    t = next(t for t in meta["tensors"] if t["name"] == "token_embd.weight")
    # offsets are from the start of the data section, which follows the aligned header
    return t["offset"], t["bytes"], t["dtype"]


def lmpipe_rows(gguf, n):
    ids = f"{work}/ids.txt"
    with open(ids, "w") as f:
        f.write(" ".join(map(str, range(n))) + "\n")
    run("rows", gguf, "--ids", ids, "-o", f"{work}/rows.npy")
    return np.load(f"{work}/rows.npy")


def rel_rms(a, b):
    return float(np.sqrt(np.mean((a.astype(np.float64) - b) ** 2)) / np.sqrt(np.mean(b.astype(np.float64) ** 2)))


bad = 0


def same_bits(what, got, want):
    global bad
    if np.array_equal(got.view(np.uint32), want.view(np.uint32)):
        print(f"ok   {what}: {want.size} floats identical")
    else:
        print(f"FAIL {what}: max |diff| {np.max(np.abs(got - want)):g}"); bad = 1


x = matrices()
np.save(f"{work}/x.npy", x)
for t in TYPES:
    ours = f"{work}/ours_{t}.gguf"
    run("export", f"{work}/x.npy", "-o", ours, "--dtype", t)
    raw = open(ours, "rb").read()
    off, nbytes, dtype = tensor_span(ours)
    data_start = len(raw) - nbytes - off  # the tensor is the file's only one, at its end
    if dtype != t or nbytes != x.size // TYPES[t][1] * TYPES[t][2] or data_start < 0:
        print(f"FAIL {t}: embed-inspect list says {dtype}, {nbytes} bytes at {off}"); bad = 1; continue
    ours_blocks = np.frombuffer(raw, dtype=np.uint8, count=nbytes, offset=data_start + off)
    # 1. GGML's blocks read by lmpipe
    theirs_blocks = ggml_quantize(t, x)
    theirs = f"{work}/theirs_{t}.gguf"
    with open(theirs, "wb") as f:
        f.write(raw[:data_start + off] + theirs_blocks.tobytes() + raw[data_start + off + nbytes:])
    same_bits(f"{t}: GGML's blocks read by lmpipe, against dequantize_row_{t}", lmpipe_rows(theirs, x.shape[0]),
              ggml_dequantize(t, theirs_blocks, x.shape))
    # q4_1, q5_0 and q5_1 quantize as GGML's reference does: the same bytes
    if t in ("q4_1", "q5_0", "q5_1"):
        if np.array_equal(ours_blocks, theirs_blocks):
            print(f"ok   {t}: lmpipe's blocks equal GGML's, byte for byte")
        else:
            print(f"FAIL {t}: {int(np.sum(ours_blocks != theirs_blocks))} bytes differ from GGML's blocks"); bad = 1
    # 2. lmpipe's blocks read by GGML
    got = lmpipe_rows(ours, x.shape[0])
    same_bits(f"{t}: lmpipe's blocks read by GGML", got, ggml_dequantize(t, ours_blocks, x.shape))
    # 3. quantization error
    e_ours = rel_rms(got, x)
    e_ggml = rel_rms(ggml_dequantize(t, theirs_blocks, x.shape), x)
    theirs_deq = ggml_dequantize(t, theirs_blocks, x.shape)
    worse = []  # rows where lmpipe's error passes 1.5x GGML's (and GGML's + 0.002)
    for i in range(x.shape[0]):
        if not np.any(x[i]): continue
        a, b = rel_rms(got[i:i + 1], x[i:i + 1]), rel_rms(theirs_deq[i:i + 1], x[i:i + 1])
        if a > max(1.5 * b, b + 0.002): worse.append(f"row {i}: {a:.5f} vs {b:.5f}")
    status = "ok  " if e_ours <= 1.15 * e_ggml and not worse else "FAIL"
    if status == "FAIL": bad = 1
    print(f"{status} {t}: relative RMS error {e_ours:.5f} (GGML {e_ggml:.5f}, ratio {e_ours / e_ggml:.3f}); "
          f"rows much worse than GGML's: {worse or 'none'}")
sys.exit(bad)
