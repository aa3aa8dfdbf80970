// The llama.cpp peer of scripts/bench/generate, through the npm package node-llama-cpp
// (its prebuilt CPU build): decode tok/s after a 4-token prompt (greedy, the first token
// excluded), and prompt processing tok/s of `pp` tokens, on a GGUF file; with a fifth
// argument "copy", the model is read into memory instead of mapped (llama.cpp's --no-mmap).
// usage: node llama_cpp_decode.mjs MODEL.gguf THREADS N_DECODE PP_TOKENS [map|copy]
import { getLlama } from "node-llama-cpp";

const [modelPath, threadsArg, nArg, ppArg, load = "map"] = process.argv.slice(2);
const threads = Number(threadsArg), n = Number(nArg), pp = Number(ppArg);
const llama = await getLlama({ gpu: false, build: "never", logLevel: "error" });
const model = await llama.loadModel({ modelPath, useMmap: load !== "copy" });
const result = {};
{
  const context = await model.createContext({ contextSize: 512, threads, batchSize: 512 });
  const seq = context.getSequence();
  let count = 0, t1 = 0;
  for await (const tok of seq.evaluate([1, 2, 3, 4], { temperature: 0 })) {
    if (count === 0) t1 = performance.now();
    if (++count > n) break;
  }
  result.decode_tok_s = (n / ((performance.now() - t1) / 1000));
  await context.dispose();
}
if (pp > 0) {
  const context = await model.createContext({ contextSize: Math.max(pp + 16, 512), threads, batchSize: pp });
  const seq = context.getSequence();
  const tokens = Array.from({ length: pp }, (_, i) => 3 + (i * 7919) % 20000);
  const t0 = performance.now();
  await seq.evaluateWithoutGeneratingNewTokens(tokens);
  result.prompt_tok_s = pp / ((performance.now() - t0) / 1000);
  await context.dispose();
}
console.log(JSON.stringify(result));
await model.dispose();
await llama.dispose();
