#!/bin/sh
# HF's other pre-tokenizers in tokenizer.json: Digits (StarCoder's individual digits),
# Punctuation with each split behaviour (Falcon's Contiguous), WhitespaceSplit,
# CharDelimiterSplit, BertPreTokenizer in a Sequence, Split with `invert` and with the
# Contiguous behaviour, and splits placed after ByteLevel (which see its byte-level
# characters: a space is Ġ there). Each form is put into byte-level BPE and WordPiece
# files that tok-train writes and, with the reference data, into GPT-2's, Llama-3's and
# BERT uncased's tokenizer.json; tok-encode --offsets must give HF tokenizers' ids and
# offsets (node binding) on the stress text and on 2,000 lines of English, code and
# Chinese. A form lmpipe does not read (ByteLevel's add_prefix_space after another split)
# must be refused with a located error.
# Needs node and @anush008/tokenizers (scripts/test installs them); skips without them.
. "$(dirname "$0")/common.inc"
require_node_peers

# variants IN.json PREFIX KIND: PREFIX_N.json for each pre-tokenizer form of KIND (bpe or
# wordpiece); prints the names, one a line, "N name".
variants() {
  node -e '
    const fs = require("fs");
    const [src, prefix, kind] = process.argv.slice(1);
    const t = JSON.parse(fs.readFileSync(src, "utf8"));
    const bl = (aps, re) => ({ type: "ByteLevel", add_prefix_space: aps, trim_offsets: true, use_regex: re });
    const seq = (...p) => ({ type: "Sequence", pretokenizers: p });
    const split = (pattern, behavior, invert) => ({ type: "Split", pattern, behavior, invert });
    const punct = (behavior) => ({ type: "Punctuation", behavior });
    const digits = (individual) => ({ type: "Digits", individual_digits: individual });
    const forms = kind === "bpe" ? {
      "starcoder: Digits(individual), ByteLevel": seq(digits(true), bl(false, true)),
      "falcon: Punctuation(Contiguous), ByteLevel, Digits, Split [0-9]{3}":
        seq(punct("Contiguous"), bl(false, true), digits(false), split({ Regex: "[0-9][0-9][0-9]" }, "Isolated", false)),
      "Punctuation(Isolated) after ByteLevel (byte-level characters)": seq(bl(false, false), punct("Isolated")),
      "Punctuation(MergedWithPrevious), ByteLevel": seq(punct("MergedWithPrevious"), bl(false, true)),
      "Punctuation(MergedWithNext), ByteLevel": seq(punct("MergedWithNext"), bl(false, true)),
      "Punctuation(Removed), ByteLevel": seq(punct("Removed"), bl(false, false)),
      "WhitespaceSplit, ByteLevel": seq({ type: "WhitespaceSplit" }, bl(false, true)),
      "CharDelimiterSplit(,), ByteLevel": seq({ type: "CharDelimiterSplit", delimiter: "," }, bl(false, true)),
      "ByteLevel, Split Ġ MergedWithNext (after ByteLevel)":
        seq(bl(false, false), split({ Regex: "\u0120" }, "MergedWithNext", false)),
      "ByteLevel, Split \\s Isolated (never matches after ByteLevel)":
        seq(bl(false, true), split({ Regex: "\\s" }, "Isolated", false)),
      "Split \\p{L}+ Removed invert, ByteLevel": seq(split({ Regex: "\\p{L}+" }, "Removed", true), bl(false, true)),
      "Split \\d+ MergedWithNext invert, ByteLevel": seq(split({ Regex: "\\d+" }, "MergedWithNext", true), bl(false, false)),
      "Split [aeiou] Contiguous, ByteLevel": seq(split({ Regex: "[aeiou]" }, "Contiguous", false), bl(false, true)),
      "BertPreTokenizer, ByteLevel": seq({ type: "BertPreTokenizer" }, bl(false, false)),
    } : {
      "WhitespaceSplit, Punctuation": seq({ type: "WhitespaceSplit" }, punct("Isolated")),
      "BertPreTokenizer, Digits(individual)": seq({ type: "BertPreTokenizer" }, digits(true)),
      "Whitespace, Digits": seq({ type: "Whitespace" }, digits(false)),
      "WhitespaceSplit": { type: "WhitespaceSplit" },
      "CharDelimiterSplit(space), Punctuation(Contiguous)":
        seq({ type: "CharDelimiterSplit", delimiter: " " }, punct("Contiguous")),
    };
    Object.entries(forms).forEach(([name, pre], i) => {
      fs.writeFileSync(`${prefix}_${i}.json`, JSON.stringify(Object.assign({}, t, { pre_tokenizer: pre })));
      console.log(`${i} ${name}`);
    });' "$1" "$2" "$3" >"$2.names" || fail=1
}

run() {  # run LABEL IN.json KIND TEXT...
  variants "$2" "$work/v" "$3"
  l=$1
  shift 3
  variants_check "$l" "$work/v" "$@"
}

text=$work/text.txt
stress_text "$text"
printf 'prices: $12,345.67 (was $9,999); a--b...c!!d ¡hola! ¿qué? «quoted» ١٢٣ ½ ² 2024-12-05\n' >>"$text"
"$bin/tok-train" -q --vocab-size 900 -P none -o "$work/bpe.json" "$text" || fail=1
run "trained BPE" "$work/bpe.json" bpe "$text"
"$bin/tok-train" -q -m wordpiece --vocab-size 800 -o "$work/wp.json" "$text" || fail=1
run "trained WordPiece" "$work/wp.json" wordpiece "$text"

# Refused: HF puts a space before every piece of the splits before ByteLevel.
node -e '
  const fs = require("fs");
  const t = JSON.parse(fs.readFileSync(process.argv[1], "utf8"));
  t.pre_tokenizer = { type: "Sequence", pretokenizers: [{ type: "Digits", individual_digits: true },
    { type: "ByteLevel", add_prefix_space: true, trim_offsets: true, use_regex: true }] };
  fs.writeFileSync(process.argv[2], JSON.stringify(t));' "$work/bpe.json" "$work/refused.json" || fail=1
if "$bin/tok-encode" -t "$work/refused.json" "$text" >/dev/null 2>"$work/err"; then
  echo "FAIL ByteLevel add_prefix_space after Digits: accepted"
  fail=1
elif grep -q "add_prefix_space after another pre-tokenizer" "$work/err"; then
  echo "ok   ByteLevel add_prefix_space after Digits: refused ($(cat "$work/err"))"
else
  echo "FAIL ByteLevel add_prefix_space after Digits: unexpected error: $(cat "$work/err")"
  fail=1
fi

if have_data; then
  for lang in en code zh; do head -n 2000 "$data/slices/${lang}_1M.txt" >"$work/$lang.txt"; done
  run "GPT-2" "$data/tokenizers/gpt2/tokenizer.json" bpe "$work/en.txt" "$work/code.txt" "$work/zh.txt"
  run "Llama-3" "$data/tokenizers/llama3/tokenizer.json" bpe "$work/en.txt" "$work/code.txt"
  run "BERT uncased" "$data/tokenizers/bert-base-uncased/tokenizer.json" wordpiece "$work/en.txt" "$work/zh.txt"
else
  echo "note: reference data not found at '$data': GPT-2, Llama-3 and BERT are not run"
fi
exit $fail
