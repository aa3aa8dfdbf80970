// Encode each line of a UTF-8 text file with HF tokenizers (npm @anush008/tokenizers)
// and print the ids in lmpipe's text format: one line of space-separated ids per input
// line, the final newline not starting a line of its own. With --decode, print instead
// the line HF decodes back from those ids (for a round-trip check).
// usage: node hf_encode_ids.js [--decode] tokenizer.json text.txt
const { Tokenizer } = require("@anush008/tokenizers");
const fs = require("fs");

const args = process.argv.slice(2);
const decode = args[0] === "--decode";
if (decode) args.shift();
if (args.length !== 2) {
  console.error("usage: node hf_encode_ids.js [--decode] tokenizer.json text.txt");
  process.exit(2);
}
const tok = Tokenizer.fromFile(args[0]);
const lines = fs.readFileSync(args[1], "utf8").split("\n");
if (lines.length && lines[lines.length - 1] === "") lines.pop();
(async () => {
  const out = [];
  for (const line of lines) {
    const enc = await tok.encode(line, null, { addSpecialTokens: false });
    const ids = Array.from(enc.getIds());
    out.push(decode ? await tok.decode(ids, false) : ids.join(" "));
  }
  process.stdout.write(out.map((l) => l + "\n").join(""));
})().catch((e) => {
  console.error(`hf_encode_ids.js: ${e}`);
  process.exit(1);
});
