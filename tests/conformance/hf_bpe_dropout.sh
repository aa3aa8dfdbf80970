#!/bin/sh
# BPE-dropout (tok-encode --sample) draws segmentations from the distribution of the
# file's own library: HF tokenizers' for a tokenizer.json (its `dropout`: a merge that is
# not skipped puts the skipped ones back, per word, and a SentencePiece-style file has one
# word per line), SentencePiece's for a .model (spm_encode --output_format=sample_id
# --alpha P: a dropped merge is gone). The generators differ, so the draws are compared as
# distributions: lmpipe's tokens per line and its distribution of ids over many draws
# against the peer's (see `distance`). Files: byte-level
# and character-level BPE and SentencePiece BPE trained here, and with the reference data
# GPT-2's, Llama-3's (ignore_merges) and Mistral's tokenizer.json. A SentencePiece BPE
# trained once and written both ways shows that the comparison can fail: its .model and
# its tokenizer.json sample far apart. Unigram sampling (--alpha, --nbest-size) against
# spm_encode too.
# Needs node and @anush008/tokenizers (scripts/test installs them); skips without them.
. "$(dirname "$0")/common.inc"
require_node_peers
js=$src/tests/conformance/hf_encode_ids.js
export PYTHONDONTWRITEBYTECODE=1

# distance OURS PEER PEER2 [far]: exit 0 when OURS draws like PEER (with `far`: when it does
# not); prints the figures. The files hold the same lines in the same order, so the token
# counts are compared line by line: the mean difference within 5 standard errors of those
# differences (a z-test: a false alarm once in millions of runs, while a rule off by 1%
# of the tokens is tens of errors away), and the distance between the distributions of
# ids (total variation) at most 1.5 times, plus 0.01, that between two runs of the peer.
distance() {
  python3 - "$@" <<'PY'
import collections, math, sys
def load(path):
    ids, counts = collections.Counter(), []
    for line in open(path):
        t = line.split()
        ids.update(t)
        counts.append(len(t))
    return ids, counts
def tv(a, b):
    na, nb = sum(a[1]), sum(b[1])
    return 0.5 * sum(abs(a[0][k] / na - b[0][k] / nb) for k in set(a[0]) | set(b[0]))
ours, peer, peer2 = (load(p) for p in sys.argv[1:4])
if not (len(ours[1]) == len(peer[1]) == len(peer2[1]) > 1):
    print(f"line counts differ: {len(ours[1])}, {len(peer[1])}, {len(peer2[1])}")
    sys.exit(1)
diff = [a - b for a, b in zip(ours[1], peer[1])]
n = len(diff)
mean = sum(diff) / n
se = math.sqrt(sum((x - mean) ** 2 for x in diff) / (n - 1) / n)
z = mean / se if se > 0 else (0.0 if mean == 0 else math.inf)
d, base = tv(ours, peer), tv(peer2, peer)
print(f"{sum(ours[1]) / n:.2f} tokens a line against {sum(peer[1]) / n:.2f} (peer again: "
      f"{sum(peer2[1]) / n:.2f}; z = {z:.1f}); id distribution distance {d:.4f} (peer again: {base:.4f})")
near = abs(z) <= 5 and d <= 1.5 * base + 0.01
sys.exit(0 if near != (len(sys.argv) > 4) else 1)
PY
}
judge() {  # judge NAME OURS PEER PEER2 [far]
  name=$1
  shift
  if distance "$@" >"$work/report"; then
    echo "ok   $name: $(cat "$work/report")"
  else
    echo "FAIL $name: $(cat "$work/report")"
    fail=1
  fi
}
with_dropout() {  # with_dropout IN.json P OUT.json
  python3 - "$@" <<'PY'
import json, sys
t = json.load(open(sys.argv[1], encoding="utf-8"))
t["model"]["dropout"] = float(sys.argv[2])
json.dump(t, open(sys.argv[3], "w", encoding="utf-8"), ensure_ascii=False)
PY
}
repeat() {  # repeat TEXT N OUT
  : >"$3"
  i=0
  while [ $i -lt "$2" ]; do cat "$1" >>"$3"; i=$((i + 1)); done
}
hf_check() {  # hf_check NAME TOKENIZER.json TEXT REPS
  repeat "$3" "$4" "$work/rep.txt"
  for p in 0.1 0.5; do
    with_dropout "$2" $p "$work/d.json" || { fail=1; return; }
    "$bin/tok-encode" -t "$work/d.json" --sample --seed 7 "$work/rep.txt" >"$work/ours" || { echo "FAIL $1: tok-encode"; fail=1; continue; }
    node "$js" "$work/d.json" "$work/rep.txt" >"$work/hf1" && node "$js" "$work/d.json" "$work/rep.txt" >"$work/hf2" ||
      { echo "FAIL $1: HF"; fail=1; continue; }
    judge "$1, dropout $p, HF tokenizers" "$work/ours" "$work/hf1" "$work/hf2"
  done
}

if have_data; then
  head -n 300 "$data/slices/en_1M.txt" >"$work/text.txt"
  head -n 100 "$data/slices/zh_1M.txt" >"$work/zh.txt"
  corpus=$data/slices/en_1M.txt reps=12
else
  stress_text "$work/text.txt"
  corpus=$work/text.txt reps=150
  echo "note: reference data not found at '$data': trained files on the stress text only"
fi

"$bin/tok-train" -q --vocab-size 3000 -o "$work/bpe.json" "$corpus" || fail=1
hf_check "byte-level BPE trained here" "$work/bpe.json" "$work/text.txt" $reps
# tok-train --dropout writes the dropout into the file: HF draws with it, and so does
# tok-encode --sample without --dropout.
"$bin/tok-train" -q --vocab-size 3000 --dropout 0.5 -o "$work/bpe_d.json" "$corpus" || fail=1
"$bin/tok-encode" -t "$work/bpe_d.json" --sample --seed 5 "$work/rep.txt" >"$work/ours" || fail=1
node "$js" "$work/bpe_d.json" "$work/rep.txt" >"$work/hf1" && node "$js" "$work/bpe_d.json" "$work/rep.txt" >"$work/hf2" || fail=1
judge "byte-level BPE trained with --dropout 0.5, the file's own dropout, HF tokenizers" "$work/ours" "$work/hf1" "$work/hf2"
"$bin/tok-train" -q -m char-bpe --vocab-size 3000 --prefix '##' -o "$work/char.json" "$corpus" || fail=1
hf_check "character-level BPE, ## and </w>" "$work/char.json" "$work/text.txt" $reps
"$bin/tok-train" -q -m sp-bpe --vocab-size 3000 -o "$work/sp.json" "$corpus" || fail=1
"$bin/tok-train" -q -m sp-bpe --vocab-size 3000 -o "$work/sp.model" "$corpus" || fail=1
hf_check "SentencePiece-style BPE tokenizer.json" "$work/sp.json" "$work/text.txt" $reps
if have_data; then
  hf_check "GPT-2" "$data/tokenizers/gpt2/tokenizer.json" "$work/text.txt" $reps
  hf_check "Llama-3 (ignore_merges), Chinese" "$data/tokenizers/llama3/tokenizer.json" "$work/zh.txt" $reps
  hf_check "Mistral" "$data/tokenizers/mistral-sp/tokenizer.json" "$work/text.txt" $reps
fi

if command -v spm_encode >/dev/null; then
  repeat "$work/text.txt" $reps "$work/rep.txt"
  "$bin/tok-train" -q -m unigram --vocab-size 3000 -o "$work/u.model" "$corpus" || fail=1
  "$bin/tok-train" -q -m unigram --vocab-size 3000 -o "$work/u.json" "$corpus" || fail=1
  for p in 0.1 0.5; do
    "$bin/tok-encode" -t "$work/sp.model" --sample --dropout $p --seed 3 "$work/rep.txt" >"$work/ours" || fail=1
    spm_encode --model="$work/sp.model" --output_format=sample_id --alpha=$p --random_seed=1 <"$work/rep.txt" >"$work/spm1" &&
      spm_encode --model="$work/sp.model" --output_format=sample_id --alpha=$p --random_seed=2 <"$work/rep.txt" >"$work/spm2" || fail=1
    judge "SentencePiece BPE .model, dropout $p, spm_encode" "$work/ours" "$work/spm1" "$work/spm2"
    # The same training as a tokenizer.json samples as HF does: far from spm's draws.
    with_dropout "$work/sp.json" $p "$work/d.json" || fail=1
    "$bin/tok-encode" -t "$work/d.json" --sample --seed 3 "$work/rep.txt" >"$work/json" || fail=1
    judge "the same training's tokenizer.json, dropout $p, is far from spm_encode's draws" "$work/json" "$work/spm1" "$work/spm2" far
    "$bin/tok-encode" -t "$work/u.model" --sample --alpha $p --seed 3 "$work/rep.txt" >"$work/ours" || fail=1
    "$bin/tok-encode" -t "$work/u.json" --sample --alpha $p --seed 4 "$work/rep.txt" >"$work/ours_json" || fail=1
    spm_encode --model="$work/u.model" --output_format=sample_id --alpha=$p --nbest_size=-1 --random_seed=1 <"$work/rep.txt" >"$work/spm1" &&
      spm_encode --model="$work/u.model" --output_format=sample_id --alpha=$p --nbest_size=-1 --random_seed=2 <"$work/rep.txt" >"$work/spm2" || fail=1
    judge "unigram .model, alpha $p, spm_encode" "$work/ours" "$work/spm1" "$work/spm2"
    judge "unigram tokenizer.json, alpha $p, spm_encode on the .model" "$work/ours_json" "$work/spm1" "$work/spm2"
  done
  # Draws among the n best (--nbest-size, spm's nbest_size). Debian's spm_encode (0.1.97)
  # weighs the n best by exp(alpha · score) in single precision, which is 0 for every one
  # of them once alpha · score < -103 (a line of 35 tokens at alpha 0.5), and then always
  # puts out the best; current SentencePiece normalizes in the log domain, as lmpipe does.
  # So alpha 0.1 on whole lines, and alpha 0.5 on lines cut to 40 bytes, where the
  # weights are exact.
  spm_nbest() {  # spm_nbest ALPHA N TEXT
    spm_encode --model="$work/u.model" --output_format=sample_id --alpha=$1 --nbest_size=$2 --random_seed=1 <"$3" >"$work/spm1" &&
      spm_encode --model="$work/u.model" --output_format=sample_id --alpha=$1 --nbest_size=$2 --random_seed=2 <"$3" >"$work/spm2" || fail=1
  }
  spm_nbest 0.1 64 "$work/rep.txt"
  "$bin/tok-encode" -t "$work/u.model" --sample --nbest-size 64 --alpha 0.1 --seed 3 "$work/rep.txt" >"$work/ours" || fail=1
  judge "unigram .model, the 64 best, alpha 0.1, spm_encode" "$work/ours" "$work/spm1" "$work/spm2"
  "$bin/tok-encode" -t "$work/u.json" --sample --nbest-size 64 --alpha 0.1 --seed 4 "$work/rep.txt" >"$work/ours" || fail=1
  judge "unigram tokenizer.json, the 64 best, alpha 0.1, spm_encode on the .model" "$work/ours" "$work/spm1" "$work/spm2"
  "$bin/tok-encode" -t "$work/u.model" --sample --nbest-size 2 --alpha 0.1 --seed 3 "$work/rep.txt" >"$work/ours" || fail=1
  judge "the 2 best are far from spm_encode's 64 best" "$work/ours" "$work/spm1" "$work/spm2" far
  "$bin/tok-encode" -t "$work/u.model" --sample --alpha 0.1 --seed 3 "$work/rep.txt" >"$work/ours" || fail=1
  judge "all segmentations are far from spm_encode's 64 best" "$work/ours" "$work/spm1" "$work/spm2" far
  LC_ALL=C cut -c1-40 "$work/text.txt" >"$work/short.txt"
  repeat "$work/short.txt" $reps "$work/srep.txt"
  spm_nbest 0.5 64 "$work/srep.txt"
  "$bin/tok-encode" -t "$work/u.model" --sample --nbest-size 64 --alpha 0.5 --seed 3 "$work/srep.txt" >"$work/ours" || fail=1
  judge "unigram .model, the 64 best, alpha 0.5, lines of 40 bytes, spm_encode" "$work/ours" "$work/spm1" "$work/spm2"
else
  echo "note: spm_encode not found (Debian package sentencepiece): SentencePiece comparisons not run"
fi
exit $fail
