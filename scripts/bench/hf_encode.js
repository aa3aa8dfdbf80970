// Encode a file with HF tokenizers' node binding, line by line in batches of 1000
// (the binding's fast path); prints the token count on stderr.
// usage: node hf_encode.js tokenizer.json corpus.txt
const { Tokenizer } = require("@anush008/tokenizers");
const fs = require("fs");
const tok = Tokenizer.fromFile(process.argv[2]);
const lines = fs.readFileSync(process.argv[3], "utf8").split("\n");
if (lines.length && lines[lines.length - 1] === "") lines.pop();
(async () => {
  let n = 0;
  for (let i = 0; i < lines.length; i += 1000) {
    const enc = await tok.encodeBatch(lines.slice(i, i + 1000), { addSpecialTokens: false });
    for (const e of enc) n += e.getIds().length;
  }
  console.error(`tokens ${n}`);
})();
