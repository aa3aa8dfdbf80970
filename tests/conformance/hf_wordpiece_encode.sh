#!/bin/sh
# tok-encode gives exactly HF tokenizers' ids for bert-base-uncased and bert-base-chinese
# (WordPiece, BertNormalizer, BertPreTokenizer) on English and Chinese text, from their
# tokenizer.json and from the bare vocab.txt.
. "$(dirname "$0")/common.inc"
require_data
for tok in bert-base-uncased bert-base-chinese; do
  for lang in en zh; do
    encode_check "$tok tokenizer.json $lang" "$data/golden/hf/${tok}_${lang}_1M.ids" "$data/slices/${lang}_1M.txt" \
      -t "$data/tokenizers/$tok/tokenizer.json"
    encode_check "$tok vocab.txt $lang" "$data/golden/hf/${tok}_${lang}_1M.ids" "$data/slices/${lang}_1M.txt" \
      -t "$data/tokenizers/$tok/vocab.txt"
  done
done
encode_check "bert-base-uncased zh, 2 threads" "$data/golden/hf/bert-base-uncased_zh_1M.ids" "$data/slices/zh_1M.txt" \
  -j 2 -t "$data/tokenizers/bert-base-uncased/tokenizer.json"
exit $fail
