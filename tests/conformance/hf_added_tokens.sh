#!/bin/sh
# Added tokens as HF matches them: `normalized: true` tokens in the normalized text, by
# their content normalized the same way (an uncased BERT's user-added "COVID19" matches
# "covid19" and "Covid19"; "[Ünï]" matches "[uni]" once accents are stripped), the others
# in the input; `lstrip` and `rstrip` take the white space beside a token into it, offsets
# included; `single_word` only outside words. Each file below gets added tokens of every
# kind; tok-encode --offsets must give HF tokenizers' ids and offsets (node binding) on text
# that hits them in many spellings: files tok-train writes (byte-level BPE with a
# normalizer chain, with and without add_prefix_space; WordPiece; character-level BPE;
# SentencePiece-style BPE and unigram, each with the ▁ put in by the Prepend and Replace
# normalizers, where a normalized token's content gets its own ▁ in front, or by the
# Metaspace pre-tokenizer after another normalizer) and, with the reference data, GPT-2's,
# BERT uncased's and Mistral's tokenizer.json.
# Needs node and @anush008/tokenizers (scripts/test installs them); skips without them.
. "$(dirname "$0")/common.inc"
require_node_peers

# variants IN.json PREFIX: PREFIX_N.json, IN.json with added tokens (and for a byte-level
# file a normalizer chain, and add_prefix_space; for a SentencePiece-style file the ▁ put in
# by normalizers or by the Metaspace pre-tokenizer); "N name" lines into PREFIX.names.
variants() {
  node -e '
    const fs = require("fs");
    const [src, prefix] = process.argv.slice(1);
    const t = JSON.parse(fs.readFileSync(src, "utf8"));
    // (a Unigram vocabulary is a list of [piece, score]: the id is the place)
    const vocab = Array.isArray(t.model.vocab) ? Object.fromEntries(t.model.vocab.map((p, i) => [p[0], i])) : t.model.vocab;
    const ids = Object.values(vocab).concat(t.added_tokens.map((a) => a.id));
    let next = Math.max(...ids) + 1;
    // (HF gives an added token the id of the same text in the vocabulary, else the next one.)
    const idOf = (content) => (content in vocab ? vocab[content] : next++);
    const tok = (content, o) => Object.assign({ id: idOf(content), content, single_word: false, lstrip: false,
                                                rstrip: false, normalized: true, special: false }, o || {});
    const added = t.added_tokens.concat([
      tok("COVID19"), tok("[Ünï]"), tok("MiXeD", { normalized: false }), tok("Straße", { lstrip: true, rstrip: true }),
      tok("\ufb01le"), tok("ok", { single_word: true }), tok("<raw>", { normalized: false, lstrip: true }),
      tok("中文", { rstrip: true })]);
    const forms = { "added tokens": {} };
    const has = (v, s) => JSON.stringify(v || null).includes(s);
    const byteLevel = has(t.pre_tokenizer, "\"ByteLevel\"") || has(t.decoder, "\"ByteLevel\"");
    if (!byteLevel && (has(t.normalizer, "\u2581") || has(t.pre_tokenizer, "Metaspace"))) {
      const ms = (scheme, split) => ({ type: "Metaspace", replacement: "\u2581", prepend_scheme: scheme, split });
      forms["added tokens, Prepend and Replace normalizers"] = { pre_tokenizer: null, normalizer: { type: "Sequence",
        normalizers: [{ type: "Prepend", prepend: "\u2581" }, { type: "Replace", pattern: { String: " " }, content: "\u2581" }] } };
      forms["added tokens, NFKC, Metaspace pre-tokenizer"] = { normalizer: { type: "NFKC" }, pre_tokenizer: ms("always", true) };
      forms["added tokens, NFKD and Lowercase, Metaspace first"] = { pre_tokenizer: ms("first", false),
        normalizer: { type: "Sequence", normalizers: [{ type: "NFKD" }, { type: "Lowercase" }] } };
    }
    if (byteLevel) {
      const chain = { type: "Sequence", normalizers: [{ type: "NFKD" }, { type: "StripAccents" }, { type: "Lowercase" }] };
      forms["added tokens, NFKD, StripAccents, Lowercase"] = { normalizer: chain };
      forms["added tokens, NFKC, ByteLevel add_prefix_space"] = { normalizer: { type: "NFKC" },
        pre_tokenizer: { type: "ByteLevel", add_prefix_space: true, trim_offsets: true, use_regex: true } };
    }
    Object.entries(forms).forEach(([name, change], i) => {
      fs.writeFileSync(`${prefix}_${i}.json`, JSON.stringify(Object.assign({}, t, change, { added_tokens: added })));
      console.log(`${i} ${name}`);
    });' "$1" "$2" >"$2.names" || fail=1
}

text=$work/text.txt
stress_text "$text"
cat >>"$text" <<'TEXT'
covid19 and COVID19 and CoViD19x, Covid19Covid19
[unï] [ÜNÏ] [Unì] [uni] MiXeD mixed MIXED
in  Strasse  straße  STRASSE	Straße
ﬁle file FILE ﬁles profile
ok token okay ok. (ok) ok_ok
a <raw> b  <raw>c <RAW>
中文分词 X中文Y 中文  z
TEXT
"$bin/tok-train" -q --vocab-size 900 -P none --initial-alphabet bytes -o "$work/bpe.json" "$text" || fail=1
run_variants "trained BPE" "$work/bpe.json" "$text"
"$bin/tok-train" -q -m wordpiece --vocab-size 800 -o "$work/wp.json" "$text" || fail=1
run_variants "trained WordPiece" "$work/wp.json" "$text"
"$bin/tok-train" -q -m char-bpe --vocab-size 800 -o "$work/char.json" "$text" || fail=1
run_variants "trained char-bpe" "$work/char.json" "$text"
"$bin/tok-train" -q -m sp-bpe --vocab-size 800 -o "$work/sp.json" "$text" || fail=1
run_variants "trained sp-bpe" "$work/sp.json" "$text"
"$bin/tok-train" -q -m unigram --vocab-size 800 -o "$work/uni.json" "$text" || fail=1
run_variants "trained unigram" "$work/uni.json" "$text"

if have_data; then
  head -n 1000 "$data/slices/en_1M.txt" >"$work/en.txt"
  run_variants "GPT-2" "$data/tokenizers/gpt2/tokenizer.json" "$work/en.txt" "$text"
  run_variants "BERT uncased" "$data/tokenizers/bert-base-uncased/tokenizer.json" "$work/en.txt" "$text"
  run_variants "Mistral" "$data/tokenizers/mistral-sp/tokenizer.json" "$work/en.txt" "$text"
else
  echo "note: reference data not found at '$data': GPT-2, BERT and Mistral are not run"
fi
exit $fail
