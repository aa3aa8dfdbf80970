#!/bin/sh
# tok-train at HF's defaults (vocab 30000, min_frequency 0, ByteLevel, no prefix space)
# gives the vocabulary and merges of HF tokenizers' BpeTrainer, in the same order.
. "$(dirname "$0")/common.inc"
require_data
golden="$data/golden/trained/hf_bpe_en_10M.json"
"$bin/tok-train" -q --vocab-size 30000 --min-frequency 0 --pre-tokenizer gpt2 \
  -o "$work/tok.json" "$data/corpus/en_10M.txt" || exit 1
# Both files are single-line JSON; compare the "model" object (vocab, then merges).
model() { awk '{ i = index($0, "\"model\":{\"type\":\"BPE\""); print substr($0, i) }' "$1"; }
model "$golden" >"$work/expected"
model "$work/tok.json" >"$work/actual"
check "BPE training on en_10M: model (vocab + merges)" "$work/expected" "$work/actual"
# Sharded counting (map-reduce) gives the same tokenizer.
split -n l/3 "$data/corpus/en_10M.txt" "$work/shard."
for s in "$work"/shard.a?; do "$bin/tok-train" count -q -o "$s.counts" "$s" || fail=1; done
"$bin/tok-train" -q --vocab-size 30000 -o "$work/sharded.json" "$work"/shard.a?.counts || fail=1
check "training from 3 shards' counts" "$work/tok.json" "$work/sharded.json"
exit $fail
