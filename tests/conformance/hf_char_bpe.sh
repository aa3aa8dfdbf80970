#!/bin/sh
# Character-level BPE over words (the original GPT's and HerBERT's "</w>" suffix, a "##"
# continuing prefix, byte fallback after a pre-tokenizer, HF's quicktour BPE, a line as
# one word): six forms made and saved by HF tokenizers itself (hf_char_bpe.js), with merges
# learnt on the test text. tok-encode must give HF's ids and offsets on every text, and
# decode HF's ids to HF's text through each form's decoder chain. With the reference data,
# also on 2,000 lines each of English and Chinese, learnt on them.
# Needs node and @anush008/tokenizers (scripts/test installs them); skips without them.
. "$(dirname "$0")/common.inc"
require_node_peers

text=$work/text.txt
stress_text "$text"
normalizer_text "$text"
printf 'unknown: ☃☃ ☄ ✈✈✈ ⛵ and again ☃, a##b and a</w>b, <unk> [UNK]\n' >>"$text"
node "$src/tests/conformance/hf_char_bpe.js" "$text" "$work/v" >"$work/v.names" || fail=1
variants_check "learnt on the stress text" "$work/v" "$text"
decodes "$work/v" "$text"

if have_data; then
  for lang in en zh; do head -n 2000 "$data/slices/${lang}_1M.txt" >"$work/$lang.txt"; done
  head -n 300 "$work/zh.txt" | cat "$work/en.txt" - >"$work/learn.txt"
  node "$src/tests/conformance/hf_char_bpe.js" "$work/learn.txt" "$work/w" >"$work/w.names" || fail=1
  variants_check "learnt on English and Chinese" "$work/w" "$work/en.txt" "$work/zh.txt"
  decodes "$work/w" "$work/en.txt" "$work/zh.txt"
else
  echo "note: reference data not found at '$data': English and Chinese are not run"
fi
exit $fail
