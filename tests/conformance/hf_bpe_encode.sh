#!/bin/sh
# tok-encode gives exactly HF tokenizers' ids for the GPT-2 and Llama-3 tokenizer.json
# files (and GPT-2's vocab.json + merges.txt), and for Mistral's SentencePiece-style one,
# on English and Chinese text.
. "$(dirname "$0")/common.inc"
require_data
for tok in gpt2 llama3; do
  for lang in en zh; do
    encode_check "$tok tokenizer.json $lang" "$data/golden/hf/${tok}_${lang}_1M.ids" "$data/slices/${lang}_1M.txt" \
      -t "$data/tokenizers/$tok/tokenizer.json"
  done
done
encode_check "gpt2 vocab.json+merges.txt en" "$data/golden/hf/gpt2_en_1M.ids" "$data/slices/en_1M.txt" \
  -t "$data/tokenizers/gpt2/vocab.json"
encode_check "llama3 zh, 2 threads" "$data/golden/hf/llama3_zh_1M.ids" "$data/slices/zh_1M.txt" \
  -j 2 -t "$data/tokenizers/llama3/tokenizer.json"
# SentencePiece-style BPE in HF's form (Mistral: byte fallback, Prepend/Replace ▁)
for lang in en zh; do
  encode_check "mistral-sp tokenizer.json $lang" "$data/golden/hf/mistral-sp_${lang}_1M.ids" "$data/slices/${lang}_1M.txt" \
    -t "$data/tokenizers/mistral-sp/tokenizer.json"
  "$bin/tok-encode" -t "$data/tokenizers/mistral-sp/tokenizer.json" -d "$work/out" >"$work/back" || fail=1
  check "mistral-sp $lang: decode(encode(x)) == x" "$data/slices/${lang}_1M.txt" "$work/back"
done
exit $fail
