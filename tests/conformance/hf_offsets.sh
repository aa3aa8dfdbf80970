#!/bin/sh
# tok-encode --offsets gives HF tokenizers' offsets (node binding; character offsets there,
# lmpipe's byte spans widened to whole characters) with the same ids: on tokenizers that
# tok-train writes (each pre-tokenizer, special tokens, a Precompiled NFKC map, byte
# fallback, unigram) and, with the reference data, on GPT-2, Llama-3, BERT uncased and
# Chinese and Mistral's SentencePiece-style tokenizer.json over 4 MB of English, Chinese,
# code and mixed text; and HF's trim_offsets (ByteLevel and RobertaProcessing
# post-processors) on GPT-2's vocabulary.
# Needs node and @anush008/tokenizers (scripts/test installs them into
# $LMPIPE_NODE_PATH, default ~/.cache/lmpipe-npm/node_modules); skips without them.
. "$(dirname "$0")/common.inc"
require_node_peers
js=$src/tests/conformance/hf_offsets.js

compare() {  # compare NAME TOKENIZER TEXT
  offsets_check "$1" "$2" "$3" node "$js"
}

text=$work/text.txt
stress_text "$text"
normalizer_text "$text"
for pre in gpt2 llama3 whitespace none; do
  "$bin/tok-train" -q --vocab-size 700 --min-frequency 2 -P "$pre" \
    -S '<|bos|>' -S '<|eos|>' -o "$work/$pre.json" "$text" || { fail=1; continue; }
  compare "trained, pre-tokenizer $pre" "$work/$pre.json" "$text"
done
# A vocabulary with all 256 bytes behind HF's NFKC and NFC normalizers (ICU's, in
# lmpipe). (Where a vocabulary has no token for a byte, both leave it out, but HF's
# offsets of the tokens after it are then off: not compared.)
"$bin/tok-train" -q --vocab-size 600 --initial-alphabet bytes -o "$work/bytes.json" "$text" || fail=1
for form in NFKC NFC; do
  sed "s/\"normalizer\":null/\"normalizer\":{\"type\":\"$form\"}/" "$work/bytes.json" >"$work/$form.json"
  grep -q "\"type\":\"$form\"" "$work/$form.json" || { echo "FAIL: no normalizer put in $form.json"; fail=1; }
  compare "trained, $form normalizer" "$work/$form.json" "$text"
done
"$bin/tok-train" -q -m sp-bpe --vocab-size 800 -o "$work/sp.json" "$text" || fail=1
compare "sp-bpe tokenizer.json (Precompiled NFKC map, byte fallback)" "$work/sp.json" "$text"
"$bin/tok-train" -q -m unigram --vocab-size 800 -o "$work/uni.json" "$text" || fail=1
compare "unigram tokenizer.json" "$work/uni.json" "$text"
# spm_train's defaults: nmt_nfkc and extra whitespace removed (Replace steps, read fast).
printf '\t tabs\tand  runs   of spaces\001 and controls  \n\342\200\213zero width\357\273\277 and BOM \n' >"$work/ws.txt"
cat "$text" "$work/ws.txt" >"$work/text_ws.txt"
for m in sp-bpe unigram; do
  "$bin/tok-train" -q -m $m --vocab-size 800 --normalization nmt_nfkc --remove-extra-whitespaces \
    -o "$work/nmt-$m.json" "$work/text_ws.txt" || fail=1
  compare "$m tokenizer.json, nmt_nfkc and extra whitespace removed" "$work/nmt-$m.json" "$work/text_ws.txt"
done
"$bin/tok-train" -q -m wordpiece --vocab-size 800 -o "$work/wp.json" "$text" || fail=1
compare "wordpiece tokenizer.json" "$work/wp.json" "$text"

# trim_offsets: HF's ByteLevel and RobertaProcessing post-processors leave the spaces at a
# token's ends out of its offsets (add_prefix_space keeps a first token's single one).
trim_variants() {  # trim_variants IN.json PREFIX
  node -e '
    const fs = require("fs");
    const [src, prefix] = process.argv.slice(1);
    const t = JSON.parse(fs.readFileSync(src, "utf8"));
    const write = (name, pp, prefixSpace) => {
      const u = Object.assign({}, t, { post_processor: pp });
      if (prefixSpace) u.pre_tokenizer = Object.assign({}, t.pre_tokenizer, { add_prefix_space: true });
      fs.writeFileSync(`${prefix}_${name}.json`, JSON.stringify(u));
    };
    write("trim", { type: "ByteLevel", add_prefix_space: true, trim_offsets: true, use_regex: true });
    write("trim_noprefix", { type: "ByteLevel", add_prefix_space: false, trim_offsets: true, use_regex: true });
    write("roberta", { type: "RobertaProcessing", sep: ["</s>", 2], cls: ["<s>", 0], trim_offsets: true,
                       add_prefix_space: true });
    write("trim_prefixed", { type: "ByteLevel", add_prefix_space: true, trim_offsets: true, use_regex: true }, true);
  ' "$1" "$2" || fail=1
}
printf '  two leading spaces\ntrailing   \n \n' >>"$work/spaces.txt"
cat "$text" >>"$work/spaces.txt"
trim_variants "$work/gpt2.json" "$work/gpt2"
for v in trim trim_noprefix roberta trim_prefixed; do
  compare "trained gpt2 split, post-processor $v" "$work/gpt2_$v.json" "$work/spaces.txt"
done

if have_data; then
  trim_variants "$data/tokenizers/gpt2/tokenizer.json" "$work/hfgpt2"
  head -n 3000 "$data/slices/en_1M.txt" >"$work/en.txt"
  head -n 3000 "$data/slices/code_1M.txt" >>"$work/en.txt"
  for v in trim trim_noprefix roberta trim_prefixed; do
    compare "GPT-2, post-processor $v, English and code" "$work/hfgpt2_$v.json" "$work/en.txt"
  done
  for tok in gpt2 llama3 bert-base-uncased bert-base-chinese mistral-sp; do
    for lang in en zh code mixed; do
      compare "$tok $lang" "$data/tokenizers/$tok/tokenizer.json" "$data/slices/${lang}_1M.txt"
    done
  done
else
  echo "note: reference data not found at '$data': only the trained tokenizers are compared"
fi
exit $fail
