#!/bin/sh
# tok-train -m sp-bpe and -m unigram keep SentencePiece's rules for ▁ in pieces, in each of
# its three settings, as spm_train does at the same settings: whitespace-only pieces (▁▁▁▁)
# by default (spm_train --allow_whitespace_only_pieces=true, as Llama 2), every ▁ a piece
# start with --no-whitespace-only-pieces (spm_train's default), pieces across words with
# --no-split-by-whitespace (--split_by_whitespace=false). Each model's pieces are checked
# against the rule (spm_train_pieces.py, which checks spm_train's too), and both encode
# held-out text: ours into at most 2% (BPE) or 5% (unigram) more tokens. On generated
# code-like text (indentation, digits beside punctuation) and, with the reference data, on
# 1 MB of code.
# Needs Debian's python3-sentencepiece and spm_train (scripts/test installs them); skips
# without them.
. "$(dirname "$0")/common.inc"
require_spm_python
checker=$src/tests/conformance/spm_train_pieces.py

# code_text SEED LINES OUT: code-like lines, the same for the same seed.
code_text() {
  "$py" - "$1" "$2" "$3" <<'PY' || fail=1
import random, sys
rng = random.Random(int(sys.argv[1]))
names = ["self", "value", "items", "count", "result", "index", "data", "key", "node", "total", "name", "size"]
calls = ["len", "range", "print", "append", "get", "update", "sorted", "max", "min", "open"]
ops = ["=", "+=", "==", "!=", "<", ">=", "+", "-", "*", "/"]
def expr():
    k = rng.random()
    if k < 0.3: return f"{rng.choice(names)}[{rng.randint(0, 20)}]"
    if k < 0.55: return f"{rng.choice(calls)}({rng.choice(names)}, {rng.randint(0, 999)})"
    if k < 0.75: return f"{rng.choice(names)}.{rng.choice(names)}"
    return str(rng.choice([0, 1, 2, 10, 16, 100, 255, 1024, 3.14, -1]))
with open(sys.argv[3], "w", encoding="utf-8") as out:
    for _ in range(int(sys.argv[2])):
        indent = " " * (4 * rng.choice([0, 1, 1, 2, 2, 3]))
        k = rng.random()
        if k < 0.15: line = f"def {rng.choice(names)}_{rng.choice(names)}({rng.choice(names)}, {rng.choice(names)}):"
        elif k < 0.3: line = f"if {expr()} {rng.choice(ops)} {expr()}:"
        elif k < 0.4: line = f"for {rng.choice(names)} in {expr()}:"
        elif k < 0.5: line = f"return {expr()}"
        elif k < 0.6: line = f"# {rng.choice(names)} of the {rng.choice(names)}, see {rng.randint(1, 99)}"
        else: line = f"{rng.choice(names)} {rng.choice(ops)} {expr()} {rng.choice(ops)} {expr()}"
        out.write(indent + line + "\n")
PY
}

# compare LABEL TRAIN HELD_OUT VOCAB: both trainers, both model types, the three settings
compare() {
  for type in bpe unigram; do
    ours_type=$type max=1.05
    [ "$type" = bpe ] && ours_type=sp-bpe max=1.02
    for mode in ws-only split no-split; do
      case $mode in
        ws-only) ours_flags="" spm_flags="--allow_whitespace_only_pieces=true" ;;
        split) ours_flags="--no-whitespace-only-pieces" spm_flags="" ;;
        *) ours_flags="--no-split-by-whitespace" spm_flags="--allow_whitespace_only_pieces=true --split_by_whitespace=false" ;;
      esac
      # shellcheck disable=SC2086
      "$bin/tok-train" -q -m "$ours_type" --vocab-size "$4" $ours_flags -o "$work/ours.model" "$2" || fail=1
      # shellcheck disable=SC2086
      (cd "$work" && spm_train --input="$2" --model_prefix=spm --model_type="$type" --vocab_size="$4" \
        --byte_fallback=true --normalization_rule_name=nfkc --remove_extra_whitespaces=false $spm_flags \
        --minloglevel=2 >/dev/null 2>&1) || { echo "FAIL $1: spm_train $type $mode"; fail=1; continue; }
      if "$py" "$checker" "$work/ours.model" "$work/spm.model" "$mode" "$3" "$max" >"$work/report"; then
        echo "ok   $1, $type, $(tail -n 1 "$work/report")"
      else
        echo "FAIL $1, $type:"
        cat "$work/report"
        fail=1
      fi
    done
  done
}

code_text 1 20000 "$work/train.txt"
code_text 2 2000 "$work/held.txt"
compare "generated code" "$work/train.txt" "$work/held.txt" 1000

if have_data; then
  head -c 800000 "$data/slices/code_1M.txt" >"$work/code_train.txt"
  tail -c 200000 "$data/slices/code_1M.txt" >"$work/code_held.txt"
  compare "1 MB of code" "$work/code_train.txt" "$work/code_held.txt" 4000
else
  echo "note: reference data not found at '$data': only generated text is compared"
fi
exit $fail
