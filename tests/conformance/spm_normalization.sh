#!/bin/sh
# tok-train's SentencePiece normalizations are spm_train's. For each rule (nfkc, nfkc_cf,
# nmt_nfkc, nmt_nfkc_cf), a model from each trainer normalizes every code point and every
# short composing sequence the same way, as spm applies them (spm_normalization.py; only
# characters newer than spm's Unicode 13 tables may differ). Then spm_train's defaults
# (nmt_nfkc, --remove_extra_whitespaces, every ▁ a piece start) against tok-train's
# --normalization nmt_nfkc --remove-extra-whitespaces --no-whitespace-only-pieces, on
# text full of tabs, runs of spaces, control characters and invisible separators: the
# same normalized held-out text line for line, and ours encodes it into at most 2% (BPE)
# or 5% (unigram) more tokens; the .json of the same training normalizes as the .model
# (and BPE gives its ids).
# Needs Debian's python3-sentencepiece and spm_train (scripts/test installs them); skips
# without them.
. "$(dirname "$0")/common.inc"
require_spm_python
checker=$src/tests/conformance/spm_normalization.py

text=$work/text.txt
stress_text "$text"
normalizer_text "$text"
for rule in nfkc nfkc_cf nmt_nfkc nmt_nfkc_cf; do
  "$bin/tok-train" -q -m sp-bpe --vocab-size 600 --character-coverage 1 --normalization "$rule" \
    -o "$work/ours.model" "$text" || { fail=1; continue; }
  (cd "$work" && spm_train --input="$text" --model_prefix=spm --model_type=bpe --vocab_size=600 \
    --byte_fallback=true --character_coverage=1 --normalization_rule_name="$rule" \
    --remove_extra_whitespaces=false --minloglevel=2 >/dev/null 2>&1) ||
    { echo "FAIL $rule: spm_train"; fail=1; continue; }
  if "$py" "$checker" "$work/ours.model" "$work/spm.model" "$rule" >"$work/report"; then
    echo "ok   $(tail -n 1 "$work/report")"
  else
    echo "FAIL $rule:"
    cat "$work/report"
    fail=1
  fi
done

# messy_text SEED LINES OUT: English-like lines with runs of spaces and tabs, spaces at
# either end, control characters, zero-width spaces, BOMs, CRs, no-break and ideographic
# spaces, full-width letters; the same for the same seed.
messy_text() {
  "$py" - "$1" "$2" "$3" <<'PY' || fail=1
import random, sys
rng = random.Random(int(sys.argv[1]))
words = ("the of and to in is was for that with as on by at from his her they this which are be "
         "model token text cache layer weight value sample vocabulary memory speed quality").split()
gaps = [" "] * 12 + ["  ", "   ", "\t", " \t ", "\u00a0", "\u3000", "\u200b", " \u200b ", "\x01", "\ufeff", "\u2028"]
with open(sys.argv[3], "w", encoding="utf-8", newline="") as out:
    for _ in range(int(sys.argv[2])):
        n = rng.randint(1, 14)
        line = rng.choice(["", "", " ", "  ", "\t"])
        for i in range(n):
            w = rng.choice(words)
            if rng.random() < 0.05:
                w = "".join(chr(ord(c) + 0xFEE0) for c in w)  # full width
            line += w + (rng.choice(gaps) if i + 1 < n else "")
        line += rng.choice(["", "", " ", "  ", "\t", "\r"])
        out.write(line + "\n")
PY
}

# compare_defaults LABEL TRAIN HELD VOCAB
compare_defaults() {
  for type in bpe unigram; do
    ours_type=$type max=1.05
    [ "$type" = bpe ] && ours_type=sp-bpe max=1.02
    "$bin/tok-train" -q -m "$ours_type" --vocab-size "$4" --normalization nmt_nfkc --remove-extra-whitespaces \
      --no-whitespace-only-pieces -o "$work/ours.model" "$2" || { fail=1; continue; }
    "$bin/tok-train" -q -m "$ours_type" --vocab-size "$4" --normalization nmt_nfkc --remove-extra-whitespaces \
      --no-whitespace-only-pieces -o "$work/ours.json" "$2" || { fail=1; continue; }
    (cd "$work" && spm_train --input="$2" --model_prefix=spm --model_type="$type" --vocab_size="$4" \
      --byte_fallback=true --minloglevel=2 >/dev/null 2>&1) || { echo "FAIL $1: spm_train $type"; fail=1; continue; }
    if "$py" - "$work/ours.model" "$work/spm.model" "$3" "$max" >"$work/report" <<'PY'; then
import sys
import sentencepiece as spm
ours, theirs = (spm.SentencePieceProcessor(model_file=m) for m in sys.argv[1:3])
with open(sys.argv[3], encoding="utf-8", newline="") as f:
    lines = [l.rstrip("\n") for l in f]
a, b = ours.encode(lines), theirs.encode(lines)
diff = [i for i, (x, y) in enumerate(zip(ours.decode(a), theirs.decode(b))) if x != y]
for i in diff[:5]:
    print("  line", i + 1, "normalized differently:", ascii(ours.decode(a[i])), ascii(theirs.decode(b[i])))
n_a, n_b = sum(map(len, a)), sum(map(len, b))
ratio = n_a / max(n_b, 1)
print(f"{len(lines)} held-out lines, {len(diff)} normalized differently; tokens {n_a} against {n_b} "
      f"({ratio:.4f}, at most {sys.argv[4]})")
sys.exit(1 if diff or ratio > float(sys.argv[4]) else 0)
PY
      echo "ok   $1, $type: $(tail -n 1 "$work/report")"
    else
      echo "FAIL $1, $type:"
      cat "$work/report"
      fail=1
    fi
    # The tokenizer.json of the same training (Replace steps for the whitespace) normalizes
    # as the .model does, and BPE gives the same ids (a unigram .json may break exact ties
    # between segmentations otherwise, in f64: docs/tok-train.md).
    tr -d '\r' <"$3" >"$work/held_lf.txt"  # (a CR would end tok-encode's line)
    "$bin/tok-encode" -t "$work/ours.model" "$work/held_lf.txt" >"$work/model.ids" || fail=1
    "$bin/tok-encode" -t "$work/ours.json" "$work/held_lf.txt" >"$work/json.ids" || fail=1
    [ "$type" = bpe ] && check "$1, $type: the .json and the .model give the same ids" "$work/model.ids" "$work/json.ids"
    "$bin/tok-encode" -t "$work/ours.model" -d "$work/model.ids" >"$work/model.txt" || fail=1
    "$bin/tok-encode" -t "$work/ours.json" -d "$work/json.ids" >"$work/json.txt" || fail=1
    check "$1, $type: the .json and the .model normalize alike" "$work/model.txt" "$work/json.txt"
  done
}

messy_text 1 6000 "$work/train.txt"
messy_text 2 1000 "$work/held.txt"
compare_defaults "generated messy text" "$work/train.txt" "$work/held.txt" 400

if have_data; then
  head -c 800000 "$data/slices/en_1M.txt" >"$work/en_train.txt"
  tail -c 200000 "$data/slices/en_1M.txt" | tail -n +2 >"$work/en_held.txt"
  compare_defaults "1 MB of English" "$work/en_train.txt" "$work/en_held.txt" 4000
else
  echo "note: reference data not found at '$data': only generated text is compared"
fi
exit $fail
