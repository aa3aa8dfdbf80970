// The llama.cpp peer of scripts/bench/kv, through the npm package node-llama-cpp (its
// prebuilt CPU build): decode tok/s after a prompt of CTX tokens with the KV cache in a
// given type (f16, q8_0, q4_0; flash attention on, which llama.cpp needs for a quantized
// V cache), greedy, the first token excluded.
// usage: node llama_cpp_kv.mjs MODEL.gguf THREADS CTX N_DECODE TYPE
import { getLlama } from "node-llama-cpp";

const [modelPath, threadsArg, ctxArg, nArg, type] = process.argv.slice(2);
const threads = Number(threadsArg), ctx = Number(ctxArg), n = Number(nArg);
const ggml = { f16: "F16", q8_0: "Q8_0", q4_0: "Q4_0", f32: "F32" }[type];
const llama = await getLlama({ gpu: false, build: "never", logLevel: "error" });
const model = await llama.loadModel({ modelPath });
const context = await model.createContext({
  contextSize: ctx + n + 16, threads, batchSize: 512, flashAttention: true,
  experimentalKvCacheKeyType: ggml, experimentalKvCacheValueType: ggml,
});
const seq = context.getSequence();
const prompt = Array.from({ length: ctx }, (_, i) => 3 + (i * 7919) % 20000);
await seq.evaluateWithoutGeneratingNewTokens(prompt.slice(0, -1));
let count = 0, t1 = 0;
for await (const tok of seq.evaluate(prompt.slice(-1), { temperature: 0 })) {
  if (count === 0) t1 = performance.now();
  if (++count > n) break;
}
console.log(JSON.stringify({ decode_tok_s: n / ((performance.now() - t1) / 1000), type }));
await context.dispose();
await model.dispose();
await llama.dispose();
