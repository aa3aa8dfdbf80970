// Character-level BPE tokenizers over words, in the forms HF tokenizers reads (the original
// GPT's and HerBERT's "</w>" suffix with BertPreTokenizer and BPEDecoder, a "##"
// continuing prefix with the WordPiece decoder, byte fallback after Whitespace with a
// decoder chain, HF's quicktour BPE with no decoder), each made and saved by HF
// tokenizers itself: the words are what HF's own normalizer and pre-tokenizer make of the
// corpus, and a plain pair-count learner here picks the merges (any merge list makes a
// valid model). Characters seen only once are left out of the vocabulary, so that the
// unknown token, fused unknowns and byte fallback all occur.
// Writes PREFIX_N.json for every form and one "N name" line per form to stdout.
// usage: node hf_char_bpe.js corpus.txt PREFIX
const fs = require("fs");
const hf = require("@anush008/tokenizers");
const { Tokenizer, BPE } = hf;

const args = process.argv.slice(2);
if (args.length !== 2) {
  console.error("usage: node hf_char_bpe.js corpus.txt PREFIX");
  process.exit(2);
}
const [corpus, prefix] = args;
const lines = fs.readFileSync(corpus, "utf8").split("\n");

const forms = [
  { name: "original GPT: BertNormalizer, BertPreTokenizer, </w> suffix, <unk>, BPEDecoder",
    normalizer: () => hf.bertNormalizer({ lowercase: true }), pre: () => hf.bertPreTokenizer(),
    decoder: () => hf.bpeDecoder("</w>"), suffix: "</w>", unk: "<unk>" },
  { name: "## prefix, fused [UNK], Whitespace, WordPiece decoder",
    pre: () => hf.whitespacePreTokenizer(), decoder: () => hf.wordPieceDecoder("##", true),
    prefix: "##", unk: "[UNK]", fuseUnk: true },
  { name: "## prefix and </w> suffix, NFKC and Lowercase, WhitespaceSplit, WordPiece decoder without cleanup",
    normalizer: () => hf.sequenceNormalizer([hf.nfkcNormalizer(), hf.lowercase()]),
    pre: () => hf.whitespaceSplitPreTokenizer(), decoder: () => hf.wordPieceDecoder("##", false),
    prefix: "##", suffix: "</w>", unk: "[UNK]" },
  { name: "byte fallback, Punctuation then Whitespace, ByteFallback, Replace, Strip, Fuse decoders",
    pre: () => hf.sequencePreTokenizer([hf.punctuationPreTokenizer(), hf.whitespacePreTokenizer()]),
    // (HF's Strip panics on a token it strips from both ends to nothing, and Fuse makes an
    // empty line one empty token: Strip takes from the start only, before Fuse)
    decoder: () => hf.sequenceDecoder([hf.byteFallbackDecoder(), hf.replaceDecoder("e", "E"),
                                       hf.stripDecoder("T", 1, 0), hf.fuseDecoder()]),
    byteFallback: true, unk: "<unk>" },
  { name: "quicktour: Whitespace, [UNK], no decoder", pre: () => hf.whitespacePreTokenizer(), unk: "[UNK]" },
  { name: "NFD, no pre-tokenizer (a line is one word), <unk>, Metaspace decoder", normalizer: () => hf.nfdNormalizer(),
    decoder: () => hf.metaspaceDecoder("\u2581", "always"), unk: "<unk>" },
];

forms.forEach((f, index) => {
  const norm = f.normalizer ? f.normalizer() : null;
  const pre = f.pre ? f.pre() : null;
  const pfx = f.prefix || "", sfx = f.suffix || "";
  const counts = new Map();
  for (const line of lines) {
    const text = norm ? norm.normalizeString(line) : line;
    const words = pre ? pre.preTokenizeString(text).map((p) => p[0]) : text ? [text] : [];
    for (const w of words) counts.set(w, (counts.get(w) || 0) + 1);
  }
  const symbolsOf = (w) => {
    const chars = Array.from(w);
    return chars.map((c, i) => (i > 0 ? pfx : "") + c + (i === chars.length - 1 ? sfx : ""));
  };
  const seen = new Map();
  const words = [];
  for (const [w, n] of counts) {
    const s = symbolsOf(w);
    for (const c of s) seen.set(c, (seen.get(c) || 0) + n);
    words.push([s, n]);
  }
  const vocab = {};
  const add = (t) => { if (!(t in vocab)) vocab[t] = Object.keys(vocab).length; };
  if (f.unk) add(f.unk);
  if (f.byteFallback) for (let b = 0; b < 256; ++b) add("<0x" + b.toString(16).toUpperCase().padStart(2, "0") + ">");
  for (const c of Array.from(seen.keys()).sort()) if (seen.get(c) >= 2) add(c);
  const merges = [];
  for (let r = 0; r < 400; ++r) {
    const pairs = new Map();
    for (const [w, n] of words)
      for (let i = 0; i + 1 < w.length; ++i) {
        if (!(w[i] in vocab) || !(w[i + 1] in vocab)) continue;
        const p = w[i] + "\u0001" + w[i + 1];
        pairs.set(p, (pairs.get(p) || 0) + n);
      }
    let best = null, bestN = 1;
    for (const [p, n] of pairs) if (n > bestN || (n === bestN && best !== null && p < best)) { best = p; bestN = n; }
    if (best === null) break;
    const [a, b] = best.split("\u0001");
    const merged = a + b.slice(pfx.length);
    merges.push([a, b]);
    add(merged);
    for (const entry of words) {
      const w = entry[0], o = [];
      for (let i = 0; i < w.length; ++i)
        if (i + 1 < w.length && w[i] === a && w[i + 1] === b) { o.push(merged); ++i; } else o.push(w[i]);
      entry[0] = o;
    }
  }
  const options = {};
  if (f.unk) options.unkToken = f.unk;
  if (f.prefix) options.continuingSubwordPrefix = f.prefix;
  if (f.suffix) options.endOfWordSuffix = f.suffix;
  if (f.fuseUnk) options.fuseUnk = true;
  if (f.byteFallback) options.byteFallback = true;
  const tok = new Tokenizer(BPE.init(vocab, merges, options));
  if (norm) tok.setNormalizer(f.normalizer());
  if (pre) tok.setPreTokenizer(f.pre());
  if (f.decoder) tok.setDecoder(f.decoder());
  tok.save(`${prefix}_${index}.json`);
  console.log(`${index} ${f.name}`);
});
