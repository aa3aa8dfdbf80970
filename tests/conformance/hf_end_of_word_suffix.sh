#!/bin/sh
# BPE with an end_of_word_suffix (CLIP's "</w>": the last symbol of every word carries it,
# so "a" inside a word and "a</w>" at its end are different tokens). A CLIP-shaped
# tokenizer.json (CLIP's normalizer, Split then ByteLevel pre-tokenizer, byte-level
# vocabulary of 256 bytes and 256 suffixed bytes, <|startoftext|> and <|endoftext|>) is
# made from merges learnt here on the test text (the plain pair-count learner of
# bpe_learner.js: any merge list makes a valid model) and saved by HF tokenizers itself.
# tok-encode must give HF's ids and offsets, and decode to HF's text, on the stress text
# and, with the reference data, 2,000 lines of English and of Chinese; without the suffix
# the file encodes differently (the check can fail).
# Needs node and @anush008/tokenizers (scripts/test installs them); skips without them.
. "$(dirname "$0")/common.inc"
require_node_peers
js=$src/tests/conformance/hf_encode_ids.js

make_clip() {  # make_clip CORPUS OUT.json [NO_SUFFIX.json]
  node -e '
    const fs = require("fs");
    const { Tokenizer, BPE } = require("@anush008/tokenizers");
    const [learner, corpus, out, plain] = process.argv.slice(1);
    const { learnMerges } = require(learner);
    // GPT-2 byte-level characters.
    const printable = [];
    for (let b = 33; b <= 126; ++b) printable.push(b);
    for (let b = 161; b <= 172; ++b) printable.push(b);
    for (let b = 174; b <= 255; ++b) printable.push(b);
    const ch = new Array(256);
    let extra = 0;
    for (let b = 0; b < 256; ++b) ch[b] = printable.includes(b) ? String.fromCodePoint(b) : String.fromCodePoint(256 + extra++);
    const pattern = "<\\|startoftext\\|>|<\\|endoftext\\|>|\x27s|\x27t|\x27re|\x27ve|\x27m|\x27ll|\x27d|[\\p{L}]+|[\\p{N}]|[^\\s\\p{L}\\p{N}]+";
    const counts = new Map();
    const text = fs.readFileSync(corpus, "utf8").normalize("NFC").replace(/\s+/gu, " ").toLowerCase();
    for (const m of text.matchAll(new RegExp(pattern, "gu"))) {
      const w = Array.from(Buffer.from(m[0], "utf8"), (b) => ch[b]);
      w[w.length - 1] += "</w>";
      const k = w.join("\u0001");
      counts.set(k, (counts.get(k) || 0) + 1);
    }
    const words = Array.from(counts, ([k, n]) => [k.split("\u0001"), n]);
    const vocab = {};
    for (const c of ch) vocab[c] = Object.keys(vocab).length;
    for (const c of ch) vocab[c + "</w>"] = Object.keys(vocab).length;
    const merges = learnMerges(words, vocab, 600);
    const save = (path, suffix) => {
      new Tokenizer(BPE.init(vocab, merges, suffix ? { endOfWordSuffix: "</w>" } : {})).save(path);
      const t = JSON.parse(fs.readFileSync(path, "utf8"));
      const n = Object.keys(vocab).length;
      const special = (id, content) => ({ id, content, single_word: false, lstrip: false, rstrip: false,
                                          normalized: true, special: true });
      Object.assign(t, {
        added_tokens: [special(n, "<|startoftext|>"), special(n + 1, "<|endoftext|>")],
        normalizer: { type: "Sequence", normalizers: [{ type: "NFC" },
          { type: "Replace", pattern: { Regex: "\\s+" }, content: " " }, { type: "Lowercase" }] },
        pre_tokenizer: { type: "Sequence", pretokenizers: [
          { type: "Split", pattern: { Regex: pattern }, behavior: "Removed", invert: true },
          { type: "ByteLevel", add_prefix_space: false, trim_offsets: true, use_regex: false }] },
        decoder: { type: "ByteLevel", add_prefix_space: true, trim_offsets: true, use_regex: true } });
      fs.writeFileSync(path, JSON.stringify(t));
    };
    save(out, true);
    if (plain) save(plain, false);' "$src/tests/conformance/bpe_learner.js" "$@"
}

compare() {  # compare NAME TOKENIZER TEXT
  offsets_check "$1: ids and offsets" "$2" "$3" node "$src/tests/conformance/hf_offsets.js"
  "$bin/tok-encode" -t "$2" "$3" >"$work/ours" || { fail=1; return; }
  "$bin/tok-encode" -t "$2" -d "$work/ours" >"$work/ours_text" || { fail=1; return; }
  node "$js" --decode "$2" "$3" >"$work/hf_text" || { fail=1; return; }
  check "$1: tok-encode decodes to HF's text" "$work/hf_text" "$work/ours_text"
}

text=$work/text.txt
stress_text "$text"
printf '<|startoftext|>a photo of a cat<|endoftext|>  A  PHOTO of   dogs, 2 cats!\n' >>"$text"
make_clip "$text" "$work/clip.json" "$work/plain.json" || fail=1
compare "CLIP-shaped, stress text" "$work/clip.json" "$text"
# The suffix matters: the same vocabulary and merges without it give other ids.
"$bin/tok-encode" -t "$work/clip.json" "$text" >"$work/with" || fail=1
"$bin/tok-encode" -t "$work/plain.json" "$text" >"$work/without" || fail=1
if cmp -s "$work/with" "$work/without"; then
  echo "FAIL the end_of_word_suffix changes nothing"
  fail=1
else
  echo "ok   the end_of_word_suffix changes the ids"
fi

if have_data; then
  for lang in en zh; do
    head -n 2000 "$data/slices/${lang}_1M.txt" >"$work/$lang.txt"
    make_clip "$work/$lang.txt" "$work/clip_$lang.json" || fail=1
    compare "CLIP-shaped, $lang" "$work/clip_$lang.json" "$work/$lang.txt"
  done
else
  echo "note: reference data not found at '$data': English and Chinese are not run"
fi
exit $fail
