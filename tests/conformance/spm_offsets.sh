#!/bin/sh
# tok-encode --offsets gives SentencePiece's own offsets (its Python binding's begin/end,
# in characters) with the same ids for .model files: models spm_train and tok-train make
# on the spot (nmt_nfkc, extra whitespace removed, byte fallback; tok-train's unigram and
# BPE) on text made to stress the normalizer, and with the reference data, the Llama-2
# model and spm_train's unigram and BPE models on 1 MB each of English, Chinese, code and
# mixed text.
# Needs Debian's python3-sentencepiece and spm_train (scripts/test installs them); skips
# without them.
. "$(dirname "$0")/common.inc"
require_spm_python
check_script=$src/tests/conformance/spm_offsets.py

compare() {  # compare NAME MODEL TEXT
  offsets_check "$1" "$2" "$3" "$py" "$check_script"
}

text=$work/text.txt
stress_text "$text"
normalizer_text "$text"
(cd "$work" && spm_train --input="$text" --model_prefix=spm_uni --vocab_size=500 --model_type=unigram \
  --byte_fallback=true --minloglevel=2 >/dev/null 2>&1) || { echo "FAIL: spm_train"; fail=1; }
(cd "$work" && spm_train --input="$text" --model_prefix=spm_bpe --vocab_size=700 --model_type=bpe \
  --minloglevel=2 >/dev/null 2>&1) || { echo "FAIL: spm_train"; fail=1; }
compare "spm_train unigram (nmt_nfkc, byte fallback)" "$work/spm_uni.model" "$text"
compare "spm_train bpe (nmt_nfkc, <unk>)" "$work/spm_bpe.model" "$text"
"$bin/tok-train" -q -m unigram --vocab-size 700 -o "$work/uni.model" "$text" || fail=1
compare "tok-train unigram .model" "$work/uni.model" "$text"
"$bin/tok-train" -q -m sp-bpe --vocab-size 700 -o "$work/bpe.model" "$text" || fail=1
compare "tok-train sp-bpe .model" "$work/bpe.model" "$text"

if have_data; then
  for model in "$data/tokenizers/llama2_spm/tokenizer.model" "$data/golden/spm/spm_unigram_en.model" \
               "$data/golden/spm/spm_bpe_en.model"; do
    for lang in en zh code mixed; do
      compare "$(basename "$(dirname "$model")")/$(basename "$model") $lang" "$model" "$data/slices/${lang}_1M.txt"
    done
  done
else
  echo "note: reference data not found at '$data': only the models made here are compared"
fi
exit $fail
