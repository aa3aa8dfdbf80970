// Encode a file with tiktoken (npm, WASM build of its Rust core), line by line.
// usage: node tiktoken_encode.js cl100k_base corpus.txt
const { get_encoding } = require("tiktoken");
const fs = require("fs");
const enc = get_encoding(process.argv[2]);
const lines = fs.readFileSync(process.argv[3], "utf8").split("\n");
let n = 0;
for (const l of lines) n += enc.encode_ordinary(l).length;
console.error(`tokens ${n}`);
