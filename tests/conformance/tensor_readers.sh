#!/bin/sh
# .npy, safetensors and GGUF files written by lmpipe (embed-inspect export) read back by
# independent readers: NumPy (Debian's python3-numpy) for .npy, a short node script for
# safetensors, and the npm package @huggingface/gguf for GGUF headers (tensor data decoded
# in the script from the GGUF block layouts). The values must equal the source's: the
# llama2.c matrix read raw by NumPy, and lmpipe's own f32 rows of the quantized tensors.
# Needs no shared data (the models are in tests/data); with ../shared/data present it
# also exports the real stories260K checkpoint.
. "$(dirname "$0")/common.inc"
require_numpy_python
node_path=${LMPIPE_NODE_PATH:-${XDG_CACHE_HOME:-$HOME/.cache}/lmpipe-npm/node_modules}
if ! NODE_PATH="$node_path" node -e 'require.resolve("@huggingface/gguf")' 2>/dev/null; then
  echo "SKIP: the npm package @huggingface/gguf is not installed (scripts/test installs it)"; exit 77
fi
tests=$src/tests
ei=$bin/embed-inspect
models="$tests/data/tiny_llama2c.bin:8"
[ -f "$data/models/stories260K/stories260K.bin" ] && models="$models $data/models/stories260K/stories260K.bin:64"
for spec in $models; do
  model=${spec%:*} dim=${spec##*:}
  name=$(basename "$model")
  "$ei" export "$model" -o "$work/e.npy" || fail=1
  "$ei" export "$model" -o "$work/e.safetensors" || fail=1
  "$ei" export "$model" -o "$work/h.safetensors" --dtype f16 || fail=1
  "$ei" export "$model" -o "$work/e.gguf" || fail=1
  "$ei" export "$model" -o "$work/b.gguf" --dtype bf16 || fail=1
  q=""
  if [ $((dim % 32)) = 0 ]; then
    "$ei" export "$model" -o "$work/q8.gguf" --dtype q8_0 && "$ei" export "$model" -o "$work/q4.gguf" --dtype q4_0 || fail=1
    "$ei" export "$work/q8.gguf" -o "$work/q8.npy" --dtype f32 && "$ei" export "$work/q4.gguf" -o "$work/q4.npy" --dtype f32 || fail=1
    q=1
  fi
  for f in e.safetensors h.safetensors; do NODE_PATH="$node_path" node "$tests/conformance/tensor_read.js" safetensors "$work/$f" >"$work/$f.json" || fail=1; done
  for f in e.gguf b.gguf ${q:+q8.gguf q4.gguf}; do NODE_PATH="$node_path" node "$tests/conformance/tensor_read.js" gguf "$work/$f" >"$work/$f.json" || fail=1; done
  "$py" - "$model" "$dim" "$work" "$q" <<'PY' || fail=1
import json, sys
import numpy as np
model, dim, work, q = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
hdr = np.fromfile(model, dtype="<i4", count=7)
vocab = abs(int(hdr[5]))
truth = np.fromfile(model, dtype="<f4", count=vocab * dim, offset=28).reshape(vocab, dim)
bad = 0
def same(what, got, want):
    global bad
    got = np.asarray(got, dtype=np.float64).reshape(want.shape)
    if np.array_equal(got, want.astype(np.float64)):
        print(f"ok   {what}: {want.shape[0]} x {want.shape[1]} values identical")
    else:
        print(f"FAIL {what}: max difference {np.max(np.abs(got - want)):g}"); bad = 1
same("numpy reads the exported .npy", np.load(f"{work}/e.npy"), truth)
t = json.load(open(f"{work}/e.safetensors.json"))["token_embd.weight"]
same("safetensors f32 (node reader)", t["values"], truth)
t = json.load(open(f"{work}/h.safetensors.json"))["token_embd.weight"]
same("safetensors f16 (node reader) vs numpy's own f16 rounding", t["values"], truth.astype(np.float16).astype(np.float32))
g = json.load(open(f"{work}/e.gguf.json"))
same("GGUF f32 (@huggingface/gguf)", g["token_embd.weight"]["values"], truth)
assert g["token_embd.weight"]["shape"] == [vocab, dim], g["token_embd.weight"]["shape"]
g = json.load(open(f"{work}/b.gguf.json"))
bf = ((truth.view(np.uint32).astype(np.uint64) + 0x7FFF + ((truth.view(np.uint32) >> 16) & 1)) >> 16).astype(np.uint32) << 16
same("GGUF bf16 (@huggingface/gguf) vs round-to-nearest-even", g["token_embd.weight"]["values"], bf.astype(np.uint32).view(np.float32))
if q:
    for k in ("q8", "q4"):
        g = json.load(open(f"{work}/{k}.gguf.json"))["token_embd.weight"]
        same(f"GGUF {k}_0 decoded by the script vs lmpipe's dequantized rows", g["values"], np.load(f"{work}/{k}.npy"))
        err = np.max(np.abs(np.load(f"{work}/{k}.npy") - truth))
        amax = np.max(np.abs(truth.reshape(-1, 32)), axis=1)
        print(f"     {k}_0 max abs error {err:.4g} (largest block scale {np.max(amax) / (127 if k == 'q8' else 8):.4g})")
sys.exit(bad)
PY
  echo "($name)"
done
exit $fail
