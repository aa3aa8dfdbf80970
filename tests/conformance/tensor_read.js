// Independent readers for the tensor conformance test: prints every tensor of a GGUF file
// (header parsed by the npm package @huggingface/gguf) or a safetensors file (parsed here,
// from its specification) as JSON {name: {shape, dtype, values}}, values decoded to numbers.
// Usage: node tensor_read.js gguf|safetensors FILE
const fs = require("fs");

function f16(h) {
  const s = h & 0x8000 ? -1 : 1, e = (h >> 10) & 0x1f, m = h & 0x3ff;
  if (e === 0) return s * m * 2 ** -24;
  if (e === 31) return m ? NaN : s * Infinity;
  return s * (1 + m / 1024) * 2 ** (e - 15);
}
function bf16(h) {
  const b = Buffer.alloc(4);
  b.writeUInt32LE(h << 16 >>> 0);
  return b.readFloatLE(0);
}
function decode(buf, off, dtype, count) {
  const v = [];
  switch (dtype) {
    case "f32": for (let i = 0; i < count; i++) v.push(buf.readFloatLE(off + 4 * i)); break;
    case "f16": for (let i = 0; i < count; i++) v.push(f16(buf.readUInt16LE(off + 2 * i))); break;
    case "bf16": for (let i = 0; i < count; i++) v.push(bf16(buf.readUInt16LE(off + 2 * i))); break;
    case "q8_0":  // blocks of 34 bytes: f16 scale, 32 × int8
      for (let b = 0; b < count / 32; b++) {
        const d = f16(buf.readUInt16LE(off + 34 * b));
        for (let j = 0; j < 32; j++) v.push(buf.readInt8(off + 34 * b + 2 + j) * d);
      }
      break;
    case "q4_0":  // blocks of 18 bytes: f16 scale, byte j = element j (low nibble), j + 16 (high)
      for (let b = 0; b < count / 32; b++) {
        const d = f16(buf.readUInt16LE(off + 18 * b)), lo = [], hi = [];
        for (let j = 0; j < 16; j++) {
          const x = buf.readUInt8(off + 18 * b + 2 + j);
          lo.push(((x & 15) - 8) * d);
          hi.push(((x >> 4) - 8) * d);
        }
        v.push(...lo, ...hi);
      }
      break;
    default: throw new Error("unknown dtype " + dtype);
  }
  return v;
}

async function main() {
  const [kind, file] = process.argv.slice(2);
  const buf = fs.readFileSync(file);
  const out = {};
  if (kind === "gguf") {
    const { gguf } = require("@huggingface/gguf");  // CommonJS: found through NODE_PATH
    const r = await gguf(file, { allowLocalFile: true });
    const names = { 0: "f32", 1: "f16", 2: "q4_0", 8: "q8_0", 30: "bf16" };
    for (const t of r.tensorInfos) {
      const shape = t.shape.map(Number).reverse();  // ggml order → row-major
      const count = shape.reduce((a, b) => a * b, 1);
      out[t.name] = { shape, dtype: names[t.dtype], values: decode(buf, Number(r.tensorDataOffset + t.offset), names[t.dtype], count) };
    }
    out.__metadata__ = { architecture: r.metadata["general.architecture"], tokens: r.metadata["tokenizer.ggml.tokens"] || null };
  } else {
    const n = Number(buf.readBigUInt64LE(0));
    const header = JSON.parse(buf.subarray(8, 8 + n).toString("utf8"));
    const names = { F32: "f32", F16: "f16", BF16: "bf16" };
    for (const [name, t] of Object.entries(header)) {
      if (name === "__metadata__") { out.__metadata__ = t; continue; }
      const count = t.shape.reduce((a, b) => a * b, 1);
      out[name] = { shape: t.shape, dtype: names[t.dtype], values: decode(buf, 8 + n + t.data_offsets[0], names[t.dtype], count) };
    }
  }
  process.stdout.write(JSON.stringify(out));
}
main().catch((e) => { console.error(e.message); process.exit(1); });
