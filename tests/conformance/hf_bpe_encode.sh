#!/bin/sh
# tok-encode gives exactly HF tokenizers' ids for the GPT-2 and Llama-3 tokenizer.json
# files (and GPT-2's vocab.json + merges.txt) on English and Chinese text.
. "$(dirname "$0")/common.inc"
for tok in gpt2 llama3; do
  for lang in en zh; do
    "$bin/tok-encode" -t "$data/tokenizers/$tok/tokenizer.json" "$data/slices/${lang}_1M.txt" >"$work/out" || fail=1
    check "$tok tokenizer.json $lang" "$data/golden/hf/${tok}_${lang}_1M.ids" "$work/out"
  done
done
"$bin/tok-encode" -t "$data/tokenizers/gpt2/vocab.json" "$data/slices/en_1M.txt" >"$work/out" || fail=1
check "gpt2 vocab.json+merges.txt en" "$data/golden/hf/gpt2_en_1M.ids" "$work/out"
"$bin/tok-encode" -j 2 -t "$data/tokenizers/llama3/tokenizer.json" "$data/slices/zh_1M.txt" >"$work/out" || fail=1
check "llama3 zh, 2 threads" "$data/golden/hf/llama3_zh_1M.ids" "$work/out"
exit $fail
