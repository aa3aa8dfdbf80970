#!/bin/sh
# tok-encode gives exactly tiktoken's ids for the gpt2 and cl100k_base rank files.
. "$(dirname "$0")/common.inc"
require_data
for enc in gpt2 cl100k_base; do
  for lang in en zh; do
    encode_check "tiktoken $enc $lang" "$data/golden/tiktoken/${enc}_${lang}_1M.ids" "$data/slices/${lang}_1M.txt" \
      -t "$data/tokenizers/tiktoken/$enc.tiktoken"
  done
done
exit $fail
