// llama.cpp's speed on a GGUF file (node-llama-cpp's prebuilt CPU build), for
// bench/llama_cpp_vs_attend.sh: prompt processing and greedy generation, tokens/s.
//
//   node llama_cpp_bench.mjs PACKAGE_DIR MODEL.gguf THREADS PROMPT_TOKENS NEW_TOKENS
// prints "prompt P tokens in S s: R tokens/s" and "generated N tokens in S s: R tokens/s".
// The prompt is token ids 1..P (speed does not depend on which); generation is
// temperature 0 with no repeat penalty, its clock started after the prompt's last token.
import path from "node:path";
import { pathToFileURL } from "node:url";

const [pkgDir, modelPath, threadsArg, promptArg, newArg] = process.argv.slice(2);
const { getLlama } = await import(
  pathToFileURL(path.join(pkgDir, "node_modules", "node-llama-cpp", "dist", "index.js")).href);
const threads = Number(threadsArg), P = Number(promptArg), N = Number(newArg);
const llama = await getLlama({ gpu: false, build: "never", logLevel: "error" });
const model = await llama.loadModel({ modelPath });
const context = await model.createContext({
  contextSize: P + N + 8, batchSize: Math.max(P, 32), threads,
  flashAttention: false,
});
const sequence = context.getSequence();
const prompt = Array.from({ length: P }, (_, i) => 1 + (i % 100));
const t0 = performance.now();
let t1 = 0, n = 0;
for await (const token of sequence.evaluate(prompt, { temperature: 0, repeatPenalty: false })) {
  if (n === 0) t1 = performance.now();
  if (++n >= N + 1) break;
}
const t2 = performance.now();
const s1 = (t1 - t0) / 1000, s2 = (t2 - t1) / 1000;
console.log(`prompt ${P} tokens in ${s1.toFixed(3)} s: ${(P / s1).toFixed(1)} tokens/s`);
console.log(`generated ${N} tokens in ${s2.toFixed(3)} s: ${(N / s2).toFixed(1)} tokens/s`);
await context.dispose();
await model.dispose();
await llama.dispose();
