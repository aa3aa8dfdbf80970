#!/bin/sh
# q4_1, q5_0, q5_1, the k-quants (q2_K … q6_K), iq4_nl and iq4_xs against GGML's own quantize and dequantize code: the
# libggml-base.so of llama.cpp's prebuilt npm package (@node-llama-cpp/linux-x64, which
# scripts/test installs), called from Python (ggml_kquants.py says what is checked).
# Needs no shared data.
. "$(dirname "$0")/common.inc"
require_numpy_python
node_path=${LMPIPE_NODE_PATH:-${XDG_CACHE_HOME:-$HOME/.cache}/lmpipe-npm/node_modules}
lib=$(ls "$node_path"/@node-llama-cpp/linux-x64/bins/*/libggml-base.so 2>/dev/null | head -1)
[ -n "$lib" ] || { echo "SKIP: the npm package @node-llama-cpp/linux-x64 is not installed in '$node_path' (scripts/test installs it)"; exit 77; }
"$py" "$src/tests/conformance/ggml_kquants.py" "$bin" "$lib" "$work" || fail=1
exit $fail
