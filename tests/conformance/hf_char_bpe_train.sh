#!/bin/sh
# tok-train -m char-bpe: character-level BPE over words.
# 1. Without affixes it is HF's BpeTrainer exactly: the same vocabulary and merges, in the
#    same order, as HF's own trainer (hf_char_bpe_train.js, which the binding runs only at
#    its defaults: vocab 30000, min_frequency 0, no specials) under the quicktour's
#    Whitespace, CharBPETokenizer's cased BertNormalizer and BertPreTokenizer,
#    WhitespaceSplit, and no pre-tokenizer (a line is a word); on the stress text, and with
#    the reference data on 1 MB of English and of Chinese.
# 2. With affixes (a "</w>" suffix, a "##" prefix, both; HF's binding cannot set them on its
#    trainer, and HF's trainer numbers affixed characters in a random order) the files
#    tok-train writes load in HF, which gives tok-encode's ids and offsets, and decodes the
#    ids to tok-encode's text, through the decoder tok-train chose.
# Needs node and @anush008/tokenizers (scripts/test installs them); skips without them.
. "$(dirname "$0")/common.inc"
require_node_peers
js=$src/tests/conformance/hf_char_bpe_train.js

same_as_hf() {  # same_as_hf LABEL CORPUS: each form trained by HF and by tok-train
  for form in whitespace bert whitespace-split none; do
    norm=identity
    [ "$form" = bert ] && norm=bert
    node "$js" "$form" "$2" "$work/hf.json" >/dev/null || { fail=1; continue; }
    node "$js" --dump "$work/hf.json" >"$work/hf.dump" || fail=1
    "$bin/tok-train" -q -m char-bpe --normalization "$norm" -P "$form" --suffix '' --unk-token '' \
      -o "$work/ours.json" "$2" || { fail=1; continue; }
    node "$js" --dump "$work/ours.json" >"$work/ours.dump" || fail=1
    check "$1, $form: HF's vocabulary and merges" "$work/hf.dump" "$work/ours.dump"
  done
}

trained() {  # trained CORPUS PREFIX [tok-train options]: PREFIX_N.json per form, PREFIX.names
  corpus=$1 prefix=$2
  shift 2
  : >"$prefix.names"
  n=0
  while IFS='|' read -r name opts; do
    n=$((n + 1))
    # shellcheck disable=SC2086 # (the form's options are words)
    eval "\"\$bin/tok-train\" -q -m char-bpe $opts \"\$@\" -o \"${prefix}_$n.json\" \"\$corpus\"" || fail=1
    echo "$n $name" >>"$prefix.names"
  done <<'FORMS'
CharBPETokenizer (cased BERT normalizer and split, </w>, <unk>)|
the original GPT (uncased, </w>)|--normalization bert-uncased
## prefix, [UNK], Whitespace, WordPiece decoder|--suffix '' --prefix '##' --unk-token '[UNK]' --normalization identity -P whitespace
## prefix and </w> suffix, WhitespaceSplit, digits apart|--prefix '##' --normalization identity -P whitespace-split --split-digits
quicktour (Whitespace, [UNK] [CLS] [SEP], no decoder)|--suffix '' --unk-token '[UNK]' -S '[UNK]' -S '[CLS]' -S '[SEP]' --normalization identity -P whitespace
FORMS
}

text=$work/text.txt
stress_text "$text"
normalizer_text "$text"
same_as_hf "the stress text" "$text"
trained "$text" "$work/v" --vocab-size 300
variants_check "trained on the stress text" "$work/v" "$text"
decodes "$work/v" "$text"

if have_data; then
  for lang in en zh; do same_as_hf "$lang 1 MB" "$data/slices/${lang}_1M.txt"; done
  for lang in en zh; do head -n 2000 "$data/slices/${lang}_1M.txt" >"$work/$lang.txt"; done
  head -n 300 "$work/zh.txt" | cat "$work/en.txt" - >"$work/learn.txt"
  # (a cut alphabet, so that unknown characters occur in the Chinese)
  trained "$work/learn.txt" "$work/w" --vocab-size 4000 --min-frequency 2 --limit-alphabet 600
  variants_check "trained on English and Chinese" "$work/w" "$work/en.txt" "$work/zh.txt"
  decodes "$work/w" "$work/en.txt" "$work/zh.txt"
else
  echo "note: reference data not found at '$data': English and Chinese are not run"
fi
exit $fail
