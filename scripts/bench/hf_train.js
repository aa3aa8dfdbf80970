// Train byte-level BPE with HF tokenizers' node binding at its defaults (vocab 30000,
// min_frequency 0; ByteLevel without prefix space): the binding cannot set the trainer.
// usage: node hf_train.js corpus.txt out.json
const { Tokenizer, BPE, byteLevelPreTokenizer } = require("@anush008/tokenizers");
const tok = new Tokenizer(BPE.empty());
tok.setPreTokenizer(byteLevelPreTokenizer(false, true));
tok.train([process.argv[2]]);
tok.save(process.argv[3]);
