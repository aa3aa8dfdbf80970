// Compare `tok-encode --offsets` rows with HF tokenizers' offsets (npm @anush008/tokenizers)
// for each line of a UTF-8 text file: the same ids, and the same spans once lmpipe's byte
// spans are widened to whole characters (HF counts characters; a byte-level token that
// holds part of a character gets the whole character there).
// usage: node hf_offsets.js tokenizer.json text.txt lmpipe.tsv
const { Tokenizer } = require("@anush008/tokenizers");
const fs = require("fs");

const args = process.argv.slice(2);
if (args.length !== 3) {
  console.error("usage: node hf_offsets.js tokenizer.json text.txt lmpipe.tsv");
  process.exit(2);
}
const tok = Tokenizer.fromFile(args[0]);
const lines = fs.readFileSync(args[1], "utf8").split("\n");
if (lines.length && lines[lines.length - 1] === "") lines.pop();
const rows = new Map();  // line number → [[begin, end, id]]
for (const row of fs.readFileSync(args[2], "utf8").split("\n")) {
  if (!row) continue;
  const f = row.split("\t");
  const n = Number(f[0]);
  if (!rows.has(n)) rows.set(n, []);
  rows.get(n).push([Number(f[1]), Number(f[2]), Number(f[3])]);
}

// starts[i] = byte offset of character i; starts[chars] = bytes of the line.
function charStarts(line) {
  const starts = [];
  let b = 0;
  for (const ch of line) {
    starts.push(b);
    b += Buffer.byteLength(ch, "utf8");
  }
  starts.push(b);
  return starts;
}

(async () => {
  let tokens = 0, bad = 0;
  for (let i = 0; i < lines.length; ++i) {
    const enc = await tok.encode(lines[i], null, { addSpecialTokens: false });
    const ids = Array.from(enc.getIds());
    const offs = enc.getOffsets();
    const ours = rows.get(i + 1) || [];
    const starts = charStarts(lines[i]);
    // The character holding byte b.
    const charAt = (b) => {
      let lo = 0, hi = starts.length - 1;
      while (lo < hi) {
        const mid = (lo + hi + 1) >> 1;
        if (starts[mid] <= b) lo = mid; else hi = mid - 1;
      }
      return lo;
    };
    tokens += ids.length;
    const problem = (what) => {
      if (++bad <= 5) console.log(`line ${i + 1}: ${what}`);
    };
    if (ours.length !== ids.length) {
      problem(`${ours.length} tokens, HF ${ids.length}`);
      continue;
    }
    for (let k = 0; k < ids.length; ++k) {
      const [b, e, id] = ours[k];
      if (id !== ids[k]) {
        problem(`token ${k}: id ${id}, HF ${ids[k]}`);
        break;
      }
      const cb = e > b ? charAt(b) : charAt(b), ce = e > b ? charAt(e - 1) + 1 : charAt(b);
      const [hb, he] = offs[k];
      if (cb !== hb || ce !== he) {
        problem(`token ${k} (id ${id}): bytes [${b}, ${e}) = characters [${cb}, ${ce}), HF [${hb}, ${he}): ` +
                JSON.stringify(lines[i].slice(0, 80)));
        break;
      }
    }
  }
  console.log(`${tokens} tokens on ${lines.length} lines, ${bad} lines differ`);
  process.exit(bad ? 1 : 0);
})().catch((e) => {
  console.error(`hf_offsets.js: ${e}`);
  process.exit(1);
});
