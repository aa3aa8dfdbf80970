#!/bin/sh
# SentencePiece-style tokenizer.json files in their newer form: no Prepend/Replace
# normalizers, HF's Metaspace pre-tokenizer instead, with prepend_scheme always, first
# (▁ only at the start of the text, not after a special token) or never, split or not.
# tok-encode gives HF tokenizers' ids, and decodes them back to HF's text: for BPE and
# Unigram models tok-train writes (rewritten to each form) on text with special tokens
# and, with the reference data, for Mistral's tokenizer rewritten the same way, on 2,000
# lines of English and of Chinese.
# Needs node and @anush008/tokenizers (scripts/test installs them); skips without them.
. "$(dirname "$0")/common.inc"
require_node_peers
js=$src/tests/conformance/hf_encode_ids.js

# variants IN.json PREFIX: PREFIX_SCHEME_SPLIT.json for each prepend_scheme and split, the
# Prepend and Replace normalizers dropped (a Precompiled map kept).
variants() {
  node -e '
    const fs = require("fs");
    const [src, prefix] = process.argv.slice(1);
    const t = JSON.parse(fs.readFileSync(src, "utf8"));
    let norm = t.normalizer;
    const keep = (n) => n && !["Prepend", "Replace"].includes(n.type);
    if (norm && norm.type === "Sequence") {
      const rest = norm.normalizers.filter(keep);
      norm = rest.length ? { type: "Sequence", normalizers: rest } : null;
    } else if (!keep(norm)) norm = null;
    for (const scheme of ["always", "first", "never"])
      for (const split of [false, true]) {
        const u = Object.assign({}, t, { normalizer: norm,
          pre_tokenizer: { type: "Metaspace", replacement: "\u2581", prepend_scheme: scheme, split } });
        fs.writeFileSync(`${prefix}_${scheme}_${split ? 1 : 0}.json`, JSON.stringify(u));
      }' "$1" "$2" || fail=1
}

compare() {  # compare NAME TOKENIZER TEXT
  "$bin/tok-encode" -t "$2" "$3" >"$work/ours" || { fail=1; return; }
  node "$js" "$2" "$3" >"$work/hf" || { fail=1; return; }
  check "$1: HF ids = tok-encode ids" "$work/hf" "$work/ours"
  "$bin/tok-encode" -t "$2" -d "$work/ours" >"$work/ours_text" || { fail=1; return; }
  node "$js" --decode "$2" "$3" >"$work/hf_text" || { fail=1; return; }
  check "$1: tok-encode decodes to HF's text" "$work/hf_text" "$work/ours_text"
}

text=$work/text.txt
cat "$src/tests/data/tiny.txt" >"$text"
cat >>"$text" <<'TEXT'
<s>Special tokens</s> inside a line, and <s> again</s>
  leading spaces, trailing spaces   
▁already a ▁ at the start
中文分词：大型语言模型的推理过程可以分解为若干阶段。
TEXT
"$bin/tok-train" -q -m sp-bpe --vocab-size 700 -o "$work/bpe.json" "$text" || fail=1
"$bin/tok-train" -q -m unigram --vocab-size 500 -o "$work/uni.json" "$text" || fail=1
variants "$work/bpe.json" "$work/bpe"
variants "$work/uni.json" "$work/uni"
for scheme in always first never; do
  for split in 0 1; do
    compare "sp-bpe, Metaspace $scheme split=$split" "$work/bpe_${scheme}_${split}.json" "$text"
    compare "unigram, Metaspace $scheme split=$split" "$work/uni_${scheme}_${split}.json" "$text"
  done
done

if have_data; then
  variants "$data/tokenizers/mistral-sp/tokenizer.json" "$work/mistral"
  head -n 2000 "$data/slices/en_1M.txt" >"$work/en.txt"
  head -n 2000 "$data/slices/zh_1M.txt" >"$work/zh.txt"
  printf '<s>Hello world\nHello <s> world</s>  x\n' >>"$work/en.txt"
  for scheme in always first never; do
    for split in 0 1; do
      for lang in en zh; do
        compare "mistral-sp, Metaspace $scheme split=$split, $lang" "$work/mistral_${scheme}_${split}.json" "$work/$lang.txt"
      done
    done
  done
else
  echo "note: reference data not found at '$data': Mistral's tokenizer is not run"
fi
exit $fail
