#!/bin/sh
# Chains of HF normalizers in SentencePiece-style tokenizer.json files (Unigram, and BPE
# over ▁ text): the forms transformers writes when it converts a SentencePiece model
# (Precompiled, Strip right, Replace " {2,}" by ▁; ALBERT's and XLNet's quotes, NFKD,
# StripAccents, Lowercase, Precompiled; DeBERTa-v2's Lowercase, Precompiled; a model with
# no converter of its own: Precompiled and Replace " " by ▁ with no pre-tokenizer), and
# other orders, before the Metaspace pre-tokenizer or with none. The character map is the
# one tok-train's Unigram file carries. tok-encode --offsets must give HF tokenizers' ids
# and offsets (node binding) on the stress text, the normalizer lines and, with the
# reference data, Mistral's tokenizer on 2,000 lines of English and Chinese.
# Needs node and @anush008/tokenizers (scripts/test installs them); skips without them.
. "$(dirname "$0")/common.inc"
require_node_peers

# variants IN.json PREFIX: PREFIX_N.json for each form, with the Precompiled map of the
# Unigram file trained below ($work/uni.json); "N name" lines into PREFIX.names.
variants() {
  node -e '
    const fs = require("fs");
    const [src, prefix, mapSrc] = process.argv.slice(1);
    const t = JSON.parse(fs.readFileSync(src, "utf8"));
    const m = JSON.parse(fs.readFileSync(mapSrc, "utf8")).normalizer.normalizers
      .find((n) => n.type === "Precompiled");
    const seq = (...n) => ({ type: "Sequence", normalizers: n });
    const nf = (type) => ({ type });
    const replace = (kind, pattern, content) => ({ type: "Replace", pattern: { [kind]: pattern }, content });
    const meta = (prepend_scheme, split) => ({ type: "Metaspace", replacement: "\u2581", prepend_scheme, split });
    const forms = {
      "transformers: Precompiled, Strip right, Replace \" {2,}\" by ▁; Metaspace always, split": [
        seq(m, { type: "Strip", strip_left: false, strip_right: true }, replace("Regex", " {2,}", "\u2581")),
        meta("always", true)],
      "ALBERT: quotes, NFKD, StripAccents, Lowercase, Precompiled, Replace \" {2,}\"; Metaspace always, split": [
        seq(replace("String", "``", "\""), replace("String", "\x27\x27", "\""), nf("NFKD"), nf("StripAccents"),
            nf("Lowercase"), m, replace("Regex", " {2,}", " ")),
        meta("always", true)],
      "DeBERTa-v2: Lowercase, Precompiled, Replace \" {2,}\"; Metaspace first, no split": [
        seq(nf("Lowercase"), m, replace("Regex", " {2,}", " ")), meta("first", false)],
      "no converter: Precompiled, Replace space by ▁; no pre-tokenizer": [seq(m, replace("String", " ", "\u2581")), null],
      "Prepend ▁, Replace space by ▁, Lowercase; no pre-tokenizer": [
        seq({ type: "Prepend", prepend: "\u2581" }, replace("String", " ", "\u2581"), nf("Lowercase")), null],
      "NFKC; Metaspace never, split": [nf("NFKC"), meta("never", true)],
      "Precompiled alone; no pre-tokenizer (spaces reach the model)": [m, null],
      "Strip both, NFD, StripAccents; Metaspace always, no split": [
        seq({ type: "Strip", strip_left: true, strip_right: true }, nf("NFD"), nf("StripAccents")),
        meta("always", false)],
    };
    Object.entries(forms).forEach(([name, [normalizer, pre_tokenizer]], i) => {
      fs.writeFileSync(`${prefix}_${i}.json`, JSON.stringify(Object.assign({}, t, { normalizer, pre_tokenizer })));
      console.log(`${i} ${name}`);
    });' "$1" "$2" "$work/uni.json" >"$2.names" || fail=1
}

text=$work/text.txt
stress_text "$text"
normalizer_text "$text"
printf 'ISTANBUL İstanbul Straße ``quoted'"''"' Café NAÏVE  two  spaces \t\n   \n   padded line   \n' >>"$text"
"$bin/tok-train" -q -m unigram --vocab-size 600 -o "$work/uni.json" "$text" || fail=1
"$bin/tok-train" -q -m sp-bpe --vocab-size 700 -o "$work/bpe.json" "$text" || fail=1
run_variants "trained Unigram" "$work/uni.json" "$text"
run_variants "trained sp-bpe" "$work/bpe.json" "$text"

if have_data; then
  for lang in en zh; do head -n 2000 "$data/slices/${lang}_1M.txt" >"$work/$lang.txt"; done
  run_variants "Mistral" "$data/tokenizers/mistral-sp/tokenizer.json" "$work/en.txt" "$work/zh.txt" "$text"
else
  echo "note: reference data not found at '$data': Mistral's tokenizer is not run"
fi
exit $fail
