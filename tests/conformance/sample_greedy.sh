#!/bin/sh
# Greedy sampling of the reference logits of stories260K (32 positions, computed by an
# independent float64 implementation) gives the reference greedy continuation: the first
# maximum of each row, as llama.cpp and llama2.c choose.
. "$(dirname "$0")/common.inc"
m=$data/models/stories260K
[ -f "$m/ref_bos.logits.npy" ] || { echo "SKIP: no stories260K reference logits at '$m' (set LMPIPE_TESTDATA)"; exit 77; }
"$bin/sample" --greedy "$m/ref_bos.logits.npy" | tr '\n' ' ' | sed 's/ $//' >"$work/got"; echo >>"$work/got" || fail=1
tr -s ' \n' ' ' <"$m/ref_bos.out.ids" | cut -d' ' -f1-32 | tr -d '\n' >"$work/want"; echo >>"$work/want"
check "greedy ids of ref_bos.logits.npy = the first 32 reference ids" "$work/want" "$work/got"
# The same through --temperature 0 with the llama order (temperature last), and top-k 1.
"$bin/sample" --temperature 0 --order llama --top-k 40 --top-p 0.9 "$m/ref_bos.logits.npy" | tr '\n' ' ' | sed 's/ $//' >"$work/got2"; echo >>"$work/got2"
check "temperature 0 after top-k and top-p (llama order)" "$work/want" "$work/got2"
"$bin/sample" --top-k 1 --seed 5 "$m/ref_bos.logits.npy" | tr '\n' ' ' | sed 's/ $//' >"$work/got3"; echo >>"$work/got3"
check "top-k 1 at temperature 1" "$work/want" "$work/got3"
exit $fail
