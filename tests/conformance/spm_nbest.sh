#!/bin/sh
# tok-encode --nbest N gives SentencePiece's own n best segmentations (its Python binding's
# NBestEncodeAsIds, the ids of spm_encode --output_format=nbest_id): for unigram .model
# files (spm_train's without byte fallback, tok-train's with it) and for HF Unigram
# tokenizer.json files of the same training, both as tok-train writes them (no
# pre-tokenizer) and split into words by a Metaspace pre-tokenizer, where lmpipe combines
# each word's n best. Equal scores may come in another order, or another of them make the
# cut at the end (spm_nbest.py). With the reference data: spm_train's English unigram
# model on English, Chinese, code and mixed text.
# Needs Debian's python3-sentencepiece and spm_train (scripts/test installs them); skips
# without them.
. "$(dirname "$0")/common.inc"
require_spm_python
checker=$src/tests/conformance/spm_nbest.py
# metaspace_split IN.json OUT.json: the same training as HF's converters once wrote it, the
# character map alone as the normalizer and a Metaspace pre-tokenizer that splits words.
metaspace_split() {
  "$py" - "$1" "$2" <<'PY' || fail=1
import json, sys
t = json.load(open(sys.argv[1], encoding="utf-8"))
t["normalizer"] = next(n for n in t["normalizer"]["normalizers"] if n["type"] == "Precompiled")
t["pre_tokenizer"] = {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always", "split": True}
json.dump(t, open(sys.argv[2], "w", encoding="utf-8"), ensure_ascii=False)
PY
}


compare() {  # compare NAME TOKENIZER MODEL TEXT N: tok-encode -t TOKENIZER against spm's MODEL
  if ! "$bin/tok-encode" -t "$2" --nbest "$5" "$4" >"$work/ours"; then
    echo "FAIL $1: tok-encode failed"
    fail=1
  elif "$py" "$checker" "$3" "$4" "$5" "$work/ours" >"$work/report"; then
    echo "ok   $1, the $5 best: $(tail -n 1 "$work/report")"
  else
    echo "FAIL $1, the $5 best:"
    cat "$work/report"
    fail=1
  fi
}

text=$work/text.txt
stress_text "$text"
normalizer_text "$text"
for i in 1 2 3 4 5 6 7 8; do cat "$src/tests/data/tiny.txt"; done >"$work/corpus.txt"
cat "$text" >>"$work/corpus.txt"
(cd "$work" && spm_train --input="$work/corpus.txt" --model_prefix=spm_uni --vocab_size=300 --model_type=unigram \
  --minloglevel=2 >/dev/null 2>&1) || { echo "FAIL: spm_train"; fail=1; }
# For the tokenizer.json files, text on which HF's pipeline and spm's agree: HF maps
# characters per grapheme cluster (docs/tok-encode.md), so no normalizer lines; a
# Metaspace split cannot join spaces into one piece, so one space between words.
stress_text "$work/plain.txt"
sed 's/[[:space:]][[:space:]]*/ /g; s/^ //; s/ $//' "$work/plain.txt" >"$work/words.txt"
"$bin/tok-train" -q -m unigram --vocab-size 500 -o "$work/u.model" "$work/corpus.txt" || fail=1
"$bin/tok-train" -q -m unigram --vocab-size 500 -o "$work/u.json" "$work/corpus.txt" || fail=1
metaspace_split "$work/u.json" "$work/split.json"
for n in 1 8 64; do
  compare "spm_train unigram (nmt_nfkc, <unk>)" "$work/spm_uni.model" "$work/spm_uni.model" "$text" $n
  compare "tok-train unigram .model (byte fallback)" "$work/u.model" "$work/u.model" "$text" $n
  compare "tok-train unigram tokenizer.json" "$work/u.json" "$work/u.model" "$work/plain.txt" $n
  compare "the same tokenizer.json split by Metaspace" "$work/split.json" "$work/u.model" "$work/words.txt" $n
done

if have_data; then
  model=$data/golden/spm/spm_unigram_en.model
  for lang in en zh code mixed; do
    head -n 2000 "$data/slices/${lang}_1M.txt" >"$work/slice.txt"
    compare "spm_unigram_en.model, $lang" "$model" "$model" "$work/slice.txt" 4
  done
  "$bin/tok-train" -q -m unigram --vocab-size 3000 -o "$work/en.model" "$data/slices/en_1M.txt" || fail=1
  "$bin/tok-train" -q -m unigram --vocab-size 3000 -o "$work/en.json" "$data/slices/en_1M.txt" || fail=1
  metaspace_split "$work/en.json" "$work/en_split.json"
  head -n 500 "$data/slices/en_1M.txt" | sed 's/[[:space:]][[:space:]]*/ /g; s/^ //; s/ $//' >"$work/slice.txt"
  compare "tok-train unigram, 3000 pieces, English, split by Metaspace" "$work/en_split.json" "$work/en.model" "$work/slice.txt" 16
else
  echo "note: reference data not found at '$data': only the models made here are compared"
fi
exit $fail
