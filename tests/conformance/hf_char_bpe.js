// Character-level BPE tokenizers over words, in the forms HF tokenizers reads (the original
// GPT's and HerBERT's "</w>" suffix with BertPreTokenizer and BPEDecoder, a "##"
// continuing prefix with the WordPiece decoder, byte fallback after Whitespace with a
// decoder chain, HF's quicktour BPE with no decoder), each made and saved by HF
// tokenizers itself: the words are what HF's own normalizer and pre-tokenizer make of the
// corpus, and the plain pair-count learner of bpe_learner.js picks the merges (any merge
// list makes a valid model). Characters seen only once are left out of the vocabulary, so that the
// unknown token, fused unknowns and byte fallback all occur.
// Writes PREFIX_N.json for every form and one "N name" line per form to stdout.
// usage: node hf_char_bpe.js corpus.txt PREFIX
const fs = require("fs");
const hf = require("@anush008/tokenizers");
const { Tokenizer, BPE } = hf;
const { learnMerges } = require("./bpe_learner.js");

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
  const merges = learnMerges(words, vocab, 400, pfx.length);
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
