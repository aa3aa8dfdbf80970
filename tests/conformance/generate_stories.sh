#!/bin/sh
# generate against the reference continuations of stories260K (a real llama2.c checkpoint,
# GQA 8/4 heads): greedy ids token for token with the f32 cache (the 34-token prompt of
# ref_prompt goes through the batched prompt path); the logits of the first 32 steps within
# 1e-4 of the float64 reference; --no-cache (the whole sequence recomputed at every step)
# within 1e-4 of the logit range of the cached run over 256 steps, with the same ids.
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
"$bin/generate" -m "$m/stories260K.bin" --ids "$m/ref_bos.in.ids" -n 256 --greedy --emit logits -o "$work/c.npy" 2>/dev/null || fail=1
"$bin/generate" -m "$m/stories260K.bin" --ids "$m/ref_bos.in.ids" -n 256 --greedy --emit logits --no-cache -o "$work/n.npy" 2>/dev/null || fail=1
"$bin/generate" -m "$m/stories260K.bin" --ids "$m/ref_bos.in.ids" -n 256 --greedy --no-cache 2>/dev/null | ids >"$work/got"
ids <"$m/ref_bos.out.ids" >"$work/want"
check "greedy continuation of ref_bos with --no-cache" "$work/want" "$work/got"
# generate perplexity on the greedy text (BOS and the reference continuation): every token
# the model's first choice, and (below) its log-probabilities those of the reference logits.
{ tr '\n' ' ' <"$m/ref_bos.in.ids"; cat "$m/ref_bos.out.ids"; } >"$work/g.ids"
"$bin/generate" perplexity -m "$m/stories260K.bin" --ids "$work/g.ids" --ctx 512 --per-token -q >"$work/ppl.tsv" || fail=1
not_first=$(awk -F'\t' '$4 != 1' "$work/ppl.tsv" | wc -l)
scored=$(wc -l <"$work/ppl.tsv")
[ "$scored" -eq 256 ] && [ "$not_first" -eq 0 ] && echo "ok   perplexity of the greedy text: 256 tokens scored, each the first choice" ||
  { echo "FAIL perplexity of the greedy text: $scored tokens scored (want 256), $not_first not the first choice"; fail=1; }
# The logits, through NumPy when it is present (scripts/test installs python3-numpy).
for p in /usr/bin/python3 python3; do
  if command -v "$p" >/dev/null 2>&1 && "$p" -c 'import numpy' 2>/dev/null; then
    "$p" - "$work/c.npy" "$work/n.npy" "$m/ref_bos.logits.npy" "$work/ppl.tsv" <<'PY' || fail=1
import sys, numpy as np
def stream(path):
    f = open(path, "rb"); rows = []
    while True:
        try: rows.append(np.load(f))
        except Exception: break
    return np.stack(rows)
cached, uncached, ref = stream(sys.argv[1]), stream(sys.argv[2]), np.load(sys.argv[3])
bad = 0
d = float(np.abs(cached[:32] - ref).max())
ok = d <= 1e-4; bad |= not ok
print(f"{'ok  ' if ok else 'FAIL'} logits of 32 steps vs the float64 reference: max |difference| {d:.3g} (range {float(ref.max() - ref.min()):.1f})")
d = float(np.abs(cached - uncached).max()); r = float(cached.max() - cached.min())
ok = d <= 1e-4 * r; bad |= not ok
print(f"{'ok  ' if ok else 'FAIL'} cached vs --no-cache over {len(cached)} steps: max |difference| {d:.3g} = {d / r:.2g} of the logit range {r:.1f}")
rows = [line.split("\t") for line in open(sys.argv[4])][:len(ref)]
ref64 = ref.astype(np.float64)
lsm = ref64 - ref64.max(axis=1, keepdims=True)
lsm -= np.log(np.exp(lsm).sum(axis=1, keepdims=True))
d = max(abs(float(r[2]) - lsm[int(r[0]) - 1, int(r[1])]) for r in rows)
ok = len(rows) == len(ref) and d <= 1e-4; bad |= not ok
print(f"{'ok  ' if ok else 'FAIL'} perplexity's log-probabilities of {len(rows)} tokens vs the reference logits' log-softmax: max |difference| {d:.3g}")
sys.exit(1 if bad else 0)
PY
    break
  fi
done
exit $fail
