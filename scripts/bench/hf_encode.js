// Encode a file with HF tokenizers' node binding, line by line in batches of 1000
// (the binding's fast path). Prints on stderr the token count and the seconds spent
// encoding (after the tokenizer is loaded and the file read), for throughput figures
// that leave loading out, as tok-encode -v reports them.
// usage: node hf_encode.js tokenizer.json corpus.txt
const { Tokenizer } = require("@anush008/tokenizers");
const fs = require("fs");
const tok = Tokenizer.fromFile(process.argv[2]);
const lines = fs.readFileSync(process.argv[3], "utf8").split("\n");
if (lines.length && lines[lines.length - 1] === "") lines.pop();
(async () => {
  const t0 = process.hrtime.bigint();
  let n = 0;
  for (let i = 0; i < lines.length; i += 1000) {
    const enc = await tok.encodeBatch(lines.slice(i, i + 1000), { addSpecialTokens: false });
    for (const e of enc) n += e.getIds().length;
  }
  const s = Number(process.hrtime.bigint() - t0) / 1e9;
  console.error(`tokens ${n} encode_s ${s.toFixed(4)}`);
})();
