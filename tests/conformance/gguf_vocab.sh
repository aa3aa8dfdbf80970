#!/bin/sh
# The tokenizers GGUF files carry, against llama.cpp's own tokenizer tests (its models/
# ggml-vocab-*.gguf files, test strings .inp separated by "__ggml_vocab_test__" lines, and
# the expected ids .out): every string, including those with newlines (tok-encode -z).
# Covered: all six: gpt-2 (byte-level BPE, GPT-2 split), deepseek-coder and falcon (byte-level
# BPE, llama.cpp's lists of splits applied in turn), llama-spm and phi-3 (SentencePiece BPE),
# bert-bge (WordPiece, the ▁ and ## spelling of llama.cpp's converter undone).
. "$(dirname "$0")/common.inc"
v=$data/llama.cpp-vocab-tests
[ -d "$v" ] || { echo "SKIP: no llama.cpp vocabulary tests at '$v' (set LMPIPE_TESTDATA)"; exit 77; }
for name in gpt-2 deepseek-coder falcon llama-spm phi-3 bert-bge; do
  perl -0777 -pe 's/\n__ggml_vocab_test__\n/\0/g' "$v/ggml-vocab-$name.gguf.inp" |
    "$bin/tok-encode" -z -t "$v/ggml-vocab-$name.gguf" >"$work/got" || fail=1
  sed 's/^ *//; s/ *$//' "$v/ggml-vocab-$name.gguf.out" >"$work/want"
  check "ggml-vocab-$name.gguf: llama.cpp's ids" "$work/want" "$work/got"
done
exit $fail
