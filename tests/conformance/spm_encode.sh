#!/bin/sh
# tok-encode gives exactly spm_encode's ids for SentencePiece .model files: the Llama-2
# model (BPE, byte fallback, identity normalization) on English and Chinese, and
# unigram and BPE models trained by spm_train (nmt_nfkc charsmap) on English; with
# Debian's spm_encode at hand, also on Chinese, --decode against spm_decode, and on a
# model trained by tok-train -m sp-bpe.
. "$(dirname "$0")/common.inc"
require_data
encode_check "llama2 .model en" "$data/golden/spm/llama2_spm_en_1M.ids" "$data/slices/en_1M.txt" \
  -t "$data/tokenizers/llama2_spm/tokenizer.model"
encode_check "llama2 .model zh" "$data/golden/spm/llama2_spm_zh_1M.ids" "$data/slices/zh_1M.txt" \
  -t "$data/tokenizers/llama2_spm/tokenizer.model"
for m in unigram bpe; do
  encode_check "spm_train $m .model en" "$data/golden/spm/spm_${m}_en_on_en_1M.ids" "$data/slices/en_1M.txt" \
    -t "$data/golden/spm/spm_${m}_en.model"
done
if command -v spm_encode >/dev/null; then
  for model in "$data/golden/spm/spm_unigram_en.model" "$data/golden/spm/spm_bpe_en.model" \
               "$data/tokenizers/llama2_spm/tokenizer.model"; do
    mname=$(basename "$model")
    spm_encode --model="$model" --output_format=id <"$data/slices/zh_1M.txt" >"$work/spm.ids"
    encode_check "$mname zh (spm_encode now)" "$work/spm.ids" "$data/slices/zh_1M.txt" -t "$model"
    spm_decode --model="$model" --input_format=id <"$work/spm.ids" >"$work/spm.txt"
    "$bin/tok-encode" -t "$model" --decode "$work/spm.ids" >"$work/ours.txt" || fail=1
    check "$mname zh --decode (spm_decode)" "$work/spm.txt" "$work/ours.txt"
  done
  # A model trained by tok-train -m sp-bpe: spm_encode loads it and agrees.
  "$bin/tok-train" -q -m sp-bpe --vocab-size 8000 -o "$work/ours.model" "$data/slices/en_1M.txt" "$data/slices/zh_1M.txt" ||
    fail=1
  "$bin/tok-train" -q -m unigram --vocab-size 8000 -o "$work/uni.model" "$data/slices/en_1M.txt" "$data/slices/zh_1M.txt" ||
    fail=1
  for lang in en zh; do
    for m in ours uni; do
      spm_encode --model="$work/$m.model" --output_format=id <"$data/slices/${lang}_1M.txt" >"$work/spm.ids"
      encode_check "tok-train $m .model $lang (spm_encode)" "$work/spm.ids" "$data/slices/${lang}_1M.txt" \
        -t "$work/$m.model"
    done
  done
else
  echo "note: spm_encode not found (Debian package sentencepiece): live comparisons not run"
fi
exit $fail
