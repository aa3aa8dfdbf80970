#!/bin/sh
# HF tokenizers (its node binding) loads what tok-train writes, unchanged, and encodes
# every line to the same ids as tok-encode, then decodes them back to the same text:
# for each pre-tokenizer, with special tokens, on the repository's small text and, when
# the reference data is there, on 1 MB of English and of Chinese.
# Needs node and @anush008/tokenizers (scripts/test installs them into
# $LMPIPE_NODE_PATH, default ~/.cache/lmpipe-npm/node_modules); skips without them.
. "$(dirname "$0")/common.inc"
require_node_peers
js=$src/tests/conformance/hf_encode_ids.js

text=$work/text.txt
stress_text "$text"

compare() {  # compare NAME TOKENIZER TEXT [lossy]
  "$bin/tok-encode" -t "$2" "$3" >"$work/ours" || { fail=1; return; }
  node "$js" "$2" "$3" >"$work/hf" || { fail=1; return; }
  check "$1: HF ids = tok-encode ids" "$work/hf" "$work/ours"
  [ "${4:-}" = lossy ] && return  # Whitespace drops the spaces; NFKC changes characters
  node "$js" --decode "$2" "$3" >"$work/hf_text" || { fail=1; return; }
  check "$1: HF decodes back the text" "$3" "$work/hf_text"
}

for pre in gpt2 cl100k llama3 o200k whitespace none; do
  "$bin/tok-train" -q --vocab-size 700 --min-frequency 2 -P "$pre" \
    -S '<|bos|>' -S '<|eos|>' -o "$work/$pre.json" "$text" || { fail=1; continue; }
  lossy=""
  [ "$pre" = whitespace ] && lossy=lossy
  compare "trained, pre-tokenizer $pre" "$work/$pre.json" "$text" $lossy
done
"$bin/tok-train" -q --vocab-size 600 --initial-alphabet bytes -o "$work/bytes.json" "$text" || fail=1
compare "trained with all 256 bytes" "$work/bytes.json" "$text"

# SentencePiece BPE written as an HF tokenizer.json (Precompiled NFKC map, byte fallback),
# and the same training as a .model: HF, tok-encode and the .model agree.
printf 'Ｆｕｌｌ-width ﬁ ligatures①, non\302\240breaking\302\240\302\240spaces, cafe\314\201\n' >>"$text"
"$bin/tok-train" -q -m sp-bpe --vocab-size 800 -o "$work/sp.json" "$text" || fail=1
"$bin/tok-train" -q -m sp-bpe --vocab-size 800 -o "$work/sp.model" "$text" || fail=1
compare "sp-bpe tokenizer.json" "$work/sp.json" "$text" lossy
"$bin/tok-encode" -t "$work/sp.model" "$text" >"$work/model.ids" || fail=1
"$bin/tok-encode" -t "$work/sp.json" "$text" >"$work/json.ids" || fail=1
check "sp-bpe: the .json and the .model give the same ids" "$work/model.ids" "$work/json.ids"
# A unigram model written as an HF Unigram tokenizer.json: HF and tok-encode agree.
"$bin/tok-train" -q -m unigram --vocab-size 800 -o "$work/uni.json" "$text" || fail=1
compare "unigram tokenizer.json" "$work/uni.json" "$text" lossy
# spm_train's defaults: nmt_nfkc (tabs to spaces, controls dropped) and extra whitespace
# removed, written as Replace steps (\A +| +\z, then " {2,}"): HF reads them as tok-encode.
printf '\t tabs\tand  runs   of spaces\001 and controls  \n   \n\342\200\213zero width\357\273\277 and BOM \n' >>"$text"
for m in sp-bpe unigram; do
  "$bin/tok-train" -q -m $m --vocab-size 800 --normalization nmt_nfkc --remove-extra-whitespaces \
    -o "$work/nmt-$m.json" "$text" || fail=1
  compare "$m tokenizer.json, nmt_nfkc and extra whitespace removed" "$work/nmt-$m.json" "$text" lossy
done

if have_data; then
  head -n 2000 "$data/slices/en_1M.txt" >"$work/en.txt"
  head -n 2000 "$data/slices/zh_1M.txt" >"$work/zh.txt"
  "$bin/tok-train" -q --vocab-size 8000 --min-frequency 2 -P llama3 -S '<|endoftext|>' \
    -o "$work/big.json" "$data/slices/en_1M.txt" "$data/slices/zh_1M.txt" || fail=1
  compare "trained on 2 MB (llama3 split), English" "$work/big.json" "$work/en.txt"
  compare "trained on 2 MB (llama3 split), Chinese" "$work/big.json" "$work/zh.txt"
  "$bin/tok-train" -q -m unigram --vocab-size 8000 -o "$work/uni-big.json" "$data/slices/en_1M.txt" "$data/slices/zh_1M.txt" ||
    fail=1
  compare "unigram trained on 2 MB, English" "$work/uni-big.json" "$work/en.txt" lossy
  compare "unigram trained on 2 MB, Chinese" "$work/uni-big.json" "$work/zh.txt" lossy
else
  echo "note: reference data not found at '$data': the 2 MB case is not run"
fi
exit $fail
