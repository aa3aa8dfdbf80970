#!/bin/sh
# tok-train --split-digits (byte-level BPE) trains what HF tokenizers' BpeTrainer trains
# behind StarCoder's pre-tokenizer, Digits(individual_digits) then ByteLevel, at HF's
# defaults (vocab 30000, min_frequency 0): the same pre-tokenizer, vocabulary and merges,
# in the same order; counting through a count file changes nothing; and HF encodes with
# the trained file to tok-encode's ids and offsets. On the stress text and, with the
# reference data, on 1 MB each of English and code.
# Needs node and @anush008/tokenizers (scripts/test installs them); skips without them.
. "$(dirname "$0")/common.inc"
require_node_peers

hf_train() {  # hf_train CORPUS OUT.json
  node -e '
    const { Tokenizer, BPE, sequencePreTokenizer, digitsPreTokenizer, byteLevelPreTokenizer } =
      require("@anush008/tokenizers");
    const tok = new Tokenizer(BPE.empty());
    tok.setPreTokenizer(sequencePreTokenizer([digitsPreTokenizer(true), byteLevelPreTokenizer(false, true)]));
    tok.train([process.argv[1]]);
    tok.save(process.argv[2]);' "$1" "$2" >/dev/null
}
part() {  # part FILE KEY: the pre_tokenizer or the model object, normalized
  node -e '
    const fs = require("fs");
    const t = JSON.parse(fs.readFileSync(process.argv[1], "utf8"));
    process.stdout.write(JSON.stringify(t[process.argv[2]]) + "\n");' "$1" "$2"
}
compare_training() {  # compare_training NAME CORPUS
  hf_train "$2" "$work/hf.json" || { fail=1; return; }
  "$bin/tok-train" -q --vocab-size 30000 --min-frequency 0 --split-digits -o "$work/ours.json" "$2" || { fail=1; return; }
  for key in pre_tokenizer model; do
    part "$work/hf.json" $key >"$work/hf.$key"
    part "$work/ours.json" $key >"$work/ours.$key"
    check "$1: $key" "$work/hf.$key" "$work/ours.$key"
  done
  "$bin/tok-train" count -q --split-digits -o "$work/c.counts" "$2" || fail=1
  "$bin/tok-train" -q --vocab-size 30000 --split-digits -o "$work/from_counts.json" "$work/c.counts" || fail=1
  check "$1: trained from a count file" "$work/ours.json" "$work/from_counts.json"
  offsets_check "$1: HF encodes with the trained file" "$work/ours.json" "$2" node "$src/tests/conformance/hf_offsets.js"
}

# WordPiece: HF's WordPieceTrainer behind BertNormalizer (uncased) and BertPreTokenizer then
# Digits(individual_digits). HF's trainer is not deterministic (hf_wordpiece_train.sh), so
# the vocabularies must agree within 3%, and exactly in their digits: the ten digits, no
# token with a digit beside another character, in both. HF encodes with the file tok-train
# writes to its ids and offsets, and a count file trains the same file.
hf_train_wp() {  # hf_train_wp CORPUS OUT.json
  node -e '
    const { Tokenizer, WordPiece, bertNormalizer, bertPreTokenizer, sequencePreTokenizer, digitsPreTokenizer } =
      require("@anush008/tokenizers");
    const tok = new Tokenizer(WordPiece.empty());
    tok.setNormalizer(bertNormalizer({ lowercase: true }));
    tok.setPreTokenizer(sequencePreTokenizer([bertPreTokenizer(), digitsPreTokenizer(true)]));
    tok.train([process.argv[1]]);
    tok.save(process.argv[2]);' "$1" "$2" >/dev/null
}
vocab_set() {  # the model's tokens but [UNK], one per line, sorted
  node -e 'const v = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8")).model.vocab;
           process.stdout.write(Object.keys(v).filter((k) => k !== "[UNK]").join("\n") + "\n");' "$1" | LC_ALL=C sort
}
compare_wordpiece() {  # compare_wordpiece NAME CORPUS [within]: "within" checks the 3% (1 MB corpora;
  # on a small text HF's ties alone change a tenth of the vocabulary from run to run)
  hf_train_wp "$2" "$work/hf_wp.json" || { fail=1; return; }
  "$bin/tok-train" -q -m wordpiece --algo hf -S '[UNK]' --split-digits -o "$work/wp.json" "$2" || { fail=1; return; }
  vocab_set "$work/hf_wp.json" >"$work/hf_wp.set"
  vocab_set "$work/wp.json" >"$work/wp.set"
  grep '[0-9]' "$work/hf_wp.set" >"$work/hf_wp.digits"
  grep '[0-9]' "$work/wp.set" >"$work/wp.digits"
  check "$1, WordPiece: the tokens with digits" "$work/hf_wp.digits" "$work/wp.digits"
  if [ "${3:-}" = within ]; then
    n=$(wc -l <"$work/wp.set")
    d=$(LC_ALL=C comm -3 "$work/hf_wp.set" "$work/wp.set" | wc -l)
    msg="$1, WordPiece: ours vs HF differ in $d of $n tokens (limit 3%)"
    if [ "$d" -le $((n * 3 / 100)) ]; then echo "ok   $msg"; else echo "FAIL $msg"; fail=1; fi
  fi
  "$bin/tok-train" count -q -m wordpiece --split-digits -o "$work/wp.counts" "$2" || fail=1
  "$bin/tok-train" -q -m wordpiece --algo hf -S '[UNK]' --split-digits -o "$work/wp_counts.json" "$work/wp.counts" || fail=1
  check "$1, WordPiece: trained from a count file" "$work/wp.json" "$work/wp_counts.json"
  offsets_check "$1, WordPiece: HF encodes with the trained file" "$work/wp.json" "$2" node "$src/tests/conformance/hf_offsets.js"
}

text=$work/text.txt
stress_text "$text"
printf 'Call 555-1234 or 2024 at 10:30, pi=3.14159, x2 y42 ١٢٣ ½ ²\n' >>"$text"
compare_training "stress text" "$text"
compare_wordpiece "stress text" "$text"
if have_data; then
  compare_training "English 1 MB" "$data/slices/en_1M.txt"
  compare_training "code 1 MB" "$data/slices/code_1M.txt"
  compare_wordpiece "English 1 MB" "$data/slices/en_1M.txt" within
else
  echo "note: reference data not found at '$data': the 1 MB corpora are not run"
fi
exit $fail
