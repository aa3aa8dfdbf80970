// Train a character-level BPE with HF tokenizers' own BpeTrainer (npm @anush008/tokenizers),
// which the binding runs at its defaults only: vocab 30000, min_frequency 0, no special
// tokens, no limit on the alphabet, no affixes. FORM picks the normalizer and pre-tokenizer:
//   whitespace        no normalizer, Whitespace (HF's quicktour)
//   bert              BertNormalizer (cased), BertPreTokenizer (HF's CharBPETokenizer)
//   whitespace-split  no normalizer, WhitespaceSplit
//   none              no normalizer, no pre-tokenizer (a line, with its newline, is one word)
// Saves the tokenizer.json. With --dump, prints a saved tokenizer.json's model as
// "id<TAB>token" lines by id, a "--merges--" line, then one merge per line, its two tokens
// joined by U+0001 (HF's trainer prints its progress on stdout, so it is not mixed in).
// usage: node hf_char_bpe_train.js FORM corpus.txt out.json | node hf_char_bpe_train.js --dump tokenizer.json
const fs = require("fs");
const hf = require("@anush008/tokenizers");

function dump(path) {
  const m = JSON.parse(fs.readFileSync(path, "utf8")).model;
  const vocab = Object.entries(m.vocab).sort((a, b) => a[1] - b[1]).map(([t, i]) => `${i}\t${t}`);
  const merges = m.merges.map((x) => (Array.isArray(x) ? x : x.split(" ")).join("\u0001"));
  process.stdout.write(vocab.join("\n") + "\n--merges--\n" + merges.map((l) => l + "\n").join(""));
}

const args = process.argv.slice(2);
if (args.length === 2 && args[0] === "--dump") {
  dump(args[1]);
} else if (args.length === 3) {
  const [form, corpus, out] = args;
  const tok = new hf.Tokenizer(hf.BPE.empty());
  if (form === "bert") {
    tok.setNormalizer(hf.bertNormalizer({ lowercase: false }));
    tok.setPreTokenizer(hf.bertPreTokenizer());
  } else if (form === "whitespace") {
    tok.setPreTokenizer(hf.whitespacePreTokenizer());
  } else if (form === "whitespace-split") {
    tok.setPreTokenizer(hf.whitespaceSplitPreTokenizer());
  } else if (form !== "none") {
    console.error(`hf_char_bpe_train.js: unknown form '${form}'`);
    process.exit(2);
  }
  tok.train([corpus]);
  tok.save(out);
} else {
  console.error("usage: node hf_char_bpe_train.js FORM corpus.txt out.json | --dump tokenizer.json");
  process.exit(2);
}
