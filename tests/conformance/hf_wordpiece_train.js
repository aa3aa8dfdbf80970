// Train WordPiece with HF tokenizers' node binding at its defaults (vocab 30000,
// min_frequency 0, no special tokens): BertNormalizer (uncased) and BertPreTokenizer,
// as BERT uses them. The binding cannot change the trainer's settings.
// usage: node hf_wordpiece_train.js corpus.txt out.json
const { Tokenizer, WordPiece, bertNormalizer, bertPreTokenizer } = require("@anush008/tokenizers");
if (process.argv.length !== 4) {
  console.error("usage: node hf_wordpiece_train.js corpus.txt out.json");
  process.exit(2);
}
const tok = new Tokenizer(WordPiece.empty());
tok.setNormalizer(bertNormalizer({ lowercase: true }));
tok.setPreTokenizer(bertPreTokenizer());
tok.train([process.argv[2]]);
tok.save(process.argv[3]);
