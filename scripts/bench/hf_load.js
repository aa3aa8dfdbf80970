// Time to load a tokenizer.json with HF tokenizers' node binding.
const { Tokenizer } = require("@anush008/tokenizers");
const t0 = process.hrtime.bigint();
Tokenizer.fromFile(process.argv[2]);
console.log(`${(Number(process.hrtime.bigint() - t0) / 1e6).toFixed(0)} ms`);
