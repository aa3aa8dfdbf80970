#!/bin/sh
# Regenerate the seed corpora of tests/fuzz/seeds from the project's own test data
# (tests/data) with the tools of a build: small files of every format each reader takes.
# Usage: tests/fuzz/make_seeds.sh BIN_DIR [SEEDS_DIR]   (default tests/fuzz/seeds)
set -eu
bin=$(cd "$1" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
data=$here/../data
out=${2:-$here/seeds}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for h in tokenizer_json vocab_txt gpt2_files tiktoken sentencepiece counts token_ids npy_stream \
         llama2c_tokenizer tensor_file; do
  rm -rf "$out/$h" && mkdir -p "$out/$h"
done
txt=$data/tiny.txt

# Tokenizers trained on tiny.txt, one per model type.
"$bin/tok-train" -q -m bpe -V 300 -F 2 -S '<|endoftext|>' -f gpt2 -o "$tmp/bpe.json" "$txt"
"$bin/tok-train" -q -m bpe -V 280 -P llama3 -o "$tmp/bpe_llama3.json" "$txt"
"$bin/tok-train" -q -m wordpiece -V 200 -o "$tmp/wp.json" "$txt"
"$bin/tok-train" -q -m wordpiece -V 200 --cased -o "$tmp/vocab.txt" "$txt"
"$bin/tok-train" -q -m sp-bpe -V 500 -o "$tmp/spbpe.model" "$txt"
"$bin/tok-train" -q -m unigram -V 500 --normalization identity -o "$tmp/unigram.model" "$txt"
"$bin/tok-train" -q -m sp-bpe -V 160 --no-byte-fallback -o "$tmp/spbpe.json" "$txt"
"$bin/tok-train" -q -m unigram -V 500 --normalization identity -o "$tmp/unigram.json" "$txt"
cp "$data/tiny.json" "$tmp/bpe.json" "$tmp/bpe_llama3.json" "$tmp/wp.json" "$tmp/spbpe.json" \
   "$tmp/unigram.json" "$out/tokenizer_json/"
# The character-class pre-tokenizers, and splits after ByteLevel (Falcon's Sequence, more).
python3 - "$tmp/bpe_llama3.json" "$out/tokenizer_json/bpe_char_splits.json" <<'PY'
import json, sys
t = json.load(open(sys.argv[1], encoding="utf-8"))
t["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
    {"type": "Punctuation", "behavior": "Contiguous"},
    {"type": "WhitespaceSplit"},
    {"type": "CharDelimiterSplit", "delimiter": "x"},
    {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
    {"type": "Digits", "individual_digits": False},
    {"type": "Split", "pattern": {"Regex": "\u0120"}, "behavior": "MergedWithNext", "invert": True}]}
json.dump(t, open(sys.argv[2], "w", encoding="utf-8"), ensure_ascii=False)
PY
# A chain of normalizers (every step type), in a byte-level and a WordPiece file.
python3 - "$tmp/bpe.json" "$tmp/wp.json" "$out/tokenizer_json" <<'PY'
import json, sys
chain = {"type": "Sequence", "normalizers": [
    {"type": "NFD"}, {"type": "Lowercase"}, {"type": "StripAccents"},
    {"type": "Replace", "pattern": {"Regex": "\\s+"}, "content": " "},
    {"type": "Replace", "pattern": {"String": "ab"}, "content": "AB!"},
    {"type": "Strip", "strip_left": True, "strip_right": False}, {"type": "NFKC"},
    {"type": "Prepend", "prepend": "> "}, {"type": "BertNormalizer", "lowercase": False}]}
for src, name in ((sys.argv[1], "bpe_normalizers.json"), (sys.argv[2], "wp_normalizers.json")):
    t = json.load(open(src, encoding="utf-8"))
    t["normalizer"] = chain
    json.dump(t, open(sys.argv[3] + "/" + name, "w", encoding="utf-8"), ensure_ascii=False)
PY
# A byte-level BPE with CLIP's end-of-word suffix (the suffixed bytes added to its vocabulary).
python3 - "$tmp/bpe.json" "$out/tokenizer_json/bpe_suffix.json" <<'PY'
import json, sys
t = json.load(open(sys.argv[1], encoding="utf-8"))
v = t["model"]["vocab"]
for tok in [k for k in v if len(k) == 1]:
    v[tok + "</w>"] = len(v)
t["model"]["end_of_word_suffix"] = "</w>"
json.dump(t, open(sys.argv[2], "w", encoding="utf-8"), ensure_ascii=False)
PY
# Chains in SentencePiece-style files: a Unigram before Metaspace, a BPE with no pre-tokenizer.
python3 - "$tmp/unigram.json" "$tmp/spbpe.json" "$out/tokenizer_json" <<'PY'
import json, sys
chain = {"type": "Sequence", "normalizers": [
    {"type": "Strip", "strip_left": False, "strip_right": True},
    {"type": "Replace", "pattern": {"Regex": " {2,}"}, "content": "\u2581"},
    {"type": "NFKD"}, {"type": "StripAccents"}, {"type": "Lowercase"},
    {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]}
for src, name, pre in ((sys.argv[1], "unigram_normalizers.json",
                        {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "first", "split": True}),
                       (sys.argv[2], "spbpe_normalizers.json", None)):
    t = json.load(open(src, encoding="utf-8"))
    t["normalizer"] = chain
    t["pre_tokenizer"] = pre
    json.dump(t, open(sys.argv[3] + "/" + name, "w", encoding="utf-8"), ensure_ascii=False)
PY
cp "$tmp/vocab.txt" "$out/vocab_txt/"
{ cat "$tmp/vocab.json"; printf '\0'; cat "$tmp/merges.txt"; } > "$out/gpt2_files/gpt2"
cp "$tmp/spbpe.model" "$tmp/unigram.model" "$out/sentencepiece/"
"$bin/tok-train" count -q -o "$out/counts/gpt2.counts" "$txt"
"$bin/tok-train" count -q -P whitespace -o "$out/counts/whitespace.counts" "$txt"
"$bin/tok-train" count -q -m wordpiece -o "$out/counts/bert.counts" "$txt"
"$bin/tok-train" count -q -m wordpiece --cased --split-digits -o "$out/counts/bert_cased_digits.counts" "$txt"

# A tiktoken rank file: the byte-level BPE's tokens, base64, by rank.
python3 - "$tmp/bpe.json" "$out/tiktoken/tiny.tiktoken" <<'PY'
import base64, json, sys
tok = json.load(open(sys.argv[1], encoding="utf-8"))
bs = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
cs, n = list(bs), 0
for b in range(256):
    if b not in bs:
        bs.append(b); cs.append(256 + n); n += 1
unbyte = {chr(c): b for b, c in zip(bs, cs)}
ranked = sorted((i, t) for t, i in tok["model"]["vocab"].items())
with open(sys.argv[2], "w") as f:
    for rank, (_, t) in enumerate(ranked):
        f.write(base64.b64encode(bytes(unbyte[ch] for ch in t)).decode() + f" {rank}\n")
PY

# Token ids: text and .npy.
cp "$data/tiny.ids" "$data/logits_i32.npy" "$out/token_ids/"
printf '1 2 3\n\n4 5\n' > "$out/token_ids/small.ids"

# .npy streams and single arrays.
cp "$data"/logits*.npy "$data/tiny_emb.npy" "$out/npy_stream/"

# llama2.c tokenizer.bin.
cp "$data/tiny_llama2c_tok.bin" "$out/llama2c_tokenizer/"

# Tensor files: the test models, and small random models of every weight type.
cp "$data/tiny.gguf" "$data/tiny.safetensors" "$data/tiny_emb.npy" "$data/logits3x6_f16.npy" \
   "$data/tiny_llama2c.bin" "$data/tiny_llama2c_untied.bin" "$out/tensor_file/"
for dt in f16 bf16 q8_0 q4_0; do
  "$bin/generate" synth --n-embd 32 --n-layer 1 --n-head 2 --n-kv-head 1 --n-ff 32 --n-vocab 8 \
    --n-ctx 16 --dtype "$dt" -o "$out/tensor_file/llama_$dt.gguf" 2>/dev/null
done
"$bin/generate" synth --arch qwen2 --n-embd 32 --n-layer 1 --n-head 2 --n-kv-head 1 --n-ff 32 \
  --n-vocab 8 --n-ctx 16 --dtype q8_0 --untied -o "$out/tensor_file/qwen2_q8_0.gguf" 2>/dev/null

# A GGUF carrying a byte-level BPE tokenizer (tokenizer.ggml.model gpt2, merges).
python3 - "$tmp/bpe.json" "$out/tensor_file/gpt2_tokenizer.gguf" <<'PY'
import json, struct, sys
tok = json.load(open(sys.argv[1], encoding="utf-8"))
vocab = sorted(tok["model"]["vocab"].items(), key=lambda kv: kv[1])
merges = [m if isinstance(m, str) else " ".join(m) for m in tok["model"]["merges"]]
def s(x):
    b = x.encode("utf-8"); return struct.pack("<Q", len(b)) + b
def kv(key, t, payload):
    return s(key) + struct.pack("<I", t) + payload
meta = [
    kv("general.architecture", 8, s("llama")),
    kv("tokenizer.ggml.model", 8, s("gpt2")),
    kv("tokenizer.ggml.pre", 8, s("gpt-2")),
    kv("tokenizer.ggml.tokens", 9, struct.pack("<IQ", 8, len(vocab)) + b"".join(s(t) for t, _ in vocab)),
    kv("tokenizer.ggml.token_type", 9, struct.pack("<IQ", 5, len(vocab)) + struct.pack(f"<{len(vocab)}i", *([3] + [1] * (len(vocab) - 1)))),
    kv("tokenizer.ggml.merges", 9, struct.pack("<IQ", 8, len(merges)) + b"".join(s(m) for m in merges)),
    kv("tokenizer.ggml.bos_token_id", 4, struct.pack("<I", 0)),
]
body = b"GGUF" + struct.pack("<IQQ", 3, 0, len(meta)) + b"".join(meta)
open(sys.argv[2], "wb").write(body)
PY
echo "seeds written to $out" >&2
