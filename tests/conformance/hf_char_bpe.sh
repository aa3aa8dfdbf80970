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

decodes() {  # decodes PREFIX TEXT...: HF's decoded text of each line = tok-encode's
  prefix=$1
  shift
  while read -r n form; do
    for t in "$@"; do
      "$bin/tok-encode" -t "${prefix}_$n.json" "$t" >"$work/ids" || { fail=1; continue; }
      "$bin/tok-encode" -t "${prefix}_$n.json" -d "$work/ids" >"$work/ours_text" || { fail=1; continue; }
      node "$src/tests/conformance/hf_encode_ids.js" --decode "${prefix}_$n.json" "$t" >"$work/hf_text" || fail=1
      check "$form, $(basename "$t"): tok-encode decodes to HF's text" "$work/hf_text" "$work/ours_text"
    done
  done <"$prefix.names"
}

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
