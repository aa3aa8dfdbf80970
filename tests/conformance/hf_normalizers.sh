#!/bin/sh
# HF's normalizers in any chain, in byte-level BPE and WordPiece tokenizer.json files: NFD,
# NFKD, NFC, NFKC, Lowercase, StripAccents (every combining mark), Strip, Replace of a
# string and of a regex (CLIP's `\s+` → " "), Prepend, and BertNormalizer inside a
# Sequence (the form of HF's WordPiece tutorial: NFD, Lowercase, StripAccents). Each form
# is put into files that tok-train writes and, with the reference data, into GPT-2's and
# BERT uncased's tokenizer.json; tok-encode --offsets must give HF tokenizers' ids and
# offsets (node binding) on the stress text, the normalizer lines and 2,000 lines of
# English and Chinese (the unit tests check that the writer keeps the chain).
# Needs node and @anush008/tokenizers (scripts/test installs them); skips without them.
. "$(dirname "$0")/common.inc"
require_node_peers

# variants IN.json PREFIX: PREFIX_N.json for each normalizer form; prints "N name" lines.
variants() {
  node -e '
    const fs = require("fs");
    const [src, prefix] = process.argv.slice(1);
    const t = JSON.parse(fs.readFileSync(src, "utf8"));
    const seq = (...n) => ({ type: "Sequence", normalizers: n });
    const nf = (type) => ({ type });
    const replace = (kind, pattern, content) => ({ type: "Replace", pattern: { [kind]: pattern }, content });
    const forms = {
      "NFD, Lowercase, StripAccents (the WordPiece tutorial)": seq(nf("NFD"), nf("Lowercase"), nf("StripAccents")),
      "NFKD": nf("NFKD"),
      "Lowercase": nf("Lowercase"),
      "CLIP: NFC, Replace \\s+ by a space, Lowercase":
        seq(nf("NFC"), replace("Regex", "\\s+", " "), nf("Lowercase")),
      "Strip both ends, NFKC": seq({ type: "Strip", strip_left: true, strip_right: true }, nf("NFKC")),
      "Strip right only": { type: "Strip", strip_left: false, strip_right: true },
      "Replace \"an\" by \"AN!\" (longer), Replace \"e\" by nothing":
        seq(replace("String", "an", "AN!"), replace("String", "e", "")),
      "Prepend \"> \", Replace space by ▁": seq({ type: "Prepend", prepend: "> " }, replace("String", " ", "\u2581")),
      "BertNormalizer (no lowercase), then Lowercase, NFC":
        seq({ type: "BertNormalizer", clean_text: true, handle_chinese_chars: true, strip_accents: false,
              lowercase: false }, nf("Lowercase"), nf("NFC")),
      "Replace [0-9] by #, NFD, StripAccents": seq(replace("Regex", "[0-9]", "#"), nf("NFD"), nf("StripAccents")),
    };
    Object.entries(forms).forEach(([name, norm], i) => {
      fs.writeFileSync(`${prefix}_${i}.json`, JSON.stringify(Object.assign({}, t, { normalizer: norm })));
      console.log(`${i} ${name}`);
    });' "$1" "$2" >"$2.names" || fail=1
}

text=$work/text.txt
stress_text "$text"
normalizer_text "$text"
printf 'ISTANBUL İstanbul ΣΑΣ Straße ǅ क्षि x\342\203\235 1990s  two  spaces \t\n   \n   padded line   \n' >>"$text"
"$bin/tok-train" -q --vocab-size 900 -P none --initial-alphabet bytes -o "$work/bpe.json" "$text" || fail=1
run_variants "trained BPE" "$work/bpe.json" "$text"
"$bin/tok-train" -q -m wordpiece --vocab-size 800 --cased -o "$work/wp.json" "$text" || fail=1
run_variants "trained WordPiece" "$work/wp.json" "$text"

if have_data; then
  for lang in en zh; do head -n 2000 "$data/slices/${lang}_1M.txt" >"$work/$lang.txt"; done
  run_variants "GPT-2" "$data/tokenizers/gpt2/tokenizer.json" "$work/en.txt" "$work/zh.txt" "$text"
  run_variants "BERT uncased" "$data/tokenizers/bert-base-uncased/tokenizer.json" "$work/en.txt" "$text"
else
  echo "note: reference data not found at '$data': GPT-2 and BERT are not run"
fi
exit $fail
