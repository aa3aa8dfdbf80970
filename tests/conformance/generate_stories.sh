#!/bin/sh
# generate against the reference continuations of stories260K (a real llama2.c checkpoint,
# GQA 8/4 heads): greedy ids token for token with the f32 cache, the logits of the first 32
# steps within 1e-4 of the float64 reference, and --no-cache giving the same logits.
. "$(dirname "$0")/common.inc"
m=$data/models/stories260K
[ -f "$m/stories260K.bin" ] || { echo "SKIP: no stories260K at '$m' (set LMPIPE_TESTDATA)"; exit 77; }
ids() { tr -s ' \n' '\n' | grep -v '^$'; }
for run in bos:256 prompt:200; do
  name=${run%:*} n=${run#*:}
  "$bin/generate" -m "$m/stories260K.bin" --ids "$m/ref_$name.in.ids" -n "$n" --greedy 2>/dev/null | ids >"$work/got" || fail=1
  ids <"$m/ref_$name.out.ids" >"$work/want"
  check "greedy continuation of ref_$name ($n tokens)" "$work/want" "$work/got"
done
"$bin/generate" -m "$m/stories260K.bin" --ids "$m/ref_bos.in.ids" -n 32 --greedy --emit logits -o "$work/c.npy" 2>/dev/null || fail=1
"$bin/generate" -m "$m/stories260K.bin" --ids "$m/ref_bos.in.ids" -n 32 --greedy --emit logits --no-cache -o "$work/n.npy" 2>/dev/null || fail=1
cmp -s "$work/c.npy" "$work/n.npy" && echo "ok   --no-cache: the same logits, byte for byte" || { echo "FAIL --no-cache logits differ"; fail=1; }
# The logits against the reference, through the tools alone: sample --greedy of ours must
# equal the reference ids, and the largest difference is printed by embed-inspect's
# reader... NumPy when present.
for p in /usr/bin/python3 python3; do
  if command -v "$p" >/dev/null 2>&1 && "$p" -c 'import numpy' 2>/dev/null; then
    "$p" - "$work/c.npy" "$m/ref_bos.logits.npy" <<'PY' || fail=1
import sys, numpy as np
f = open(sys.argv[1], "rb"); rows = []
while True:
    try: rows.append(np.load(f))
    except Exception: break
got, ref = np.stack(rows), np.load(sys.argv[2])
d = float(np.abs(got - ref).max())
print(f"{'ok  ' if d <= 1e-4 else 'FAIL'} logits of 32 steps vs the float64 reference: max |difference| {d:.3g} (range {float(ref.max() - ref.min()):.1f})")
sys.exit(0 if d <= 1e-4 else 1)
PY
    break
  fi
done
exit $fail
