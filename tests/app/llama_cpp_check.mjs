// What llama.cpp computes on a GGUF file: the independent checker of attend's GGUF export
// (tests/app/test_gguf.cpp runs it). llama.cpp comes prebuilt for the CPU
// from the npm package node-llama-cpp (scripts/setup.sh --test-extras installs it); nothing
// is built or downloaded here.
//
//   node llama_cpp_check.mjs PACKAGE_DIR MODEL.gguf REQUEST.json
// where REQUEST.json is {"tokens": [...], "generate": N, "threads": T, "text": "..."}, prints
// one JSON object:
//   logprobs  log p(tokens[i+1] | tokens[0..i]) for each i, from a softmax of the raw logits
//   greedy    N tokens continuing `tokens`, each the most likely (temperature 0)
//   tokenized llama.cpp's tokenization of `text` (no BOS added, special tokens as text)
// Exit 3 when the package cannot be loaded (the test then reports itself skipped).
import fs from "node:fs";
import path from "node:path";
import { pathToFileURL } from "node:url";

const [pkgDir, modelPath, requestFile] = process.argv.slice(2);
const request = JSON.parse(fs.readFileSync(requestFile, "utf8"));

let getLlama;
try {
  const entry = path.join(pkgDir, "node_modules", "node-llama-cpp", "dist", "index.js");
  ({ getLlama } = await import(pathToFileURL(entry).href));
} catch (e) {
  console.error(`node-llama-cpp not loadable from ${pkgDir}: ${e.message}`);
  process.exit(3);
}

// F32 keys and values in the cache and no flash attention: llama.cpp's defaults (an f16
// cache) move log-probs by ~7e-4, more than the comparison is about.
const llama = await getLlama({ gpu: false, build: "never", logLevel: "error" });
const model = await llama.loadModel({ modelPath });
const tokens = request.tokens ?? [];
const generate = request.generate ?? 0;
const context = await model.createContext({
  contextSize: Math.max(tokens.length + generate, 8),
  threads: request.threads ?? 1,
  experimentalKvCacheKeyType: "F32",
  experimentalKvCacheValueType: "F32",
  flashAttention: false,
});
const sequence = context.getSequence();
const out = {};

if (tokens.length > 0) {
  const input = tokens.map((t) => [t, { generateNext: { probabilities: true, options: { temperature: 0 } } }]);
  const results = await sequence.controlledEvaluate(input);
  out.logprobs = [];
  for (let i = 0; i + 1 < tokens.length; ++i) {
    const p = results[i]?.next?.probabilities?.get(tokens[i + 1]);
    out.logprobs.push(p > 0 ? Math.log(p) : null);
  }
  out.greedy = [];
  let next = [...results[tokens.length - 1].next.probabilities.entries()][0][0];
  for (let k = 0; k < generate; ++k) {
    out.greedy.push(next);
    if (k + 1 === generate) break;
    const r = await sequence.controlledEvaluate([[next, { generateNext: { token: true, options: { temperature: 0 } } }]]);
    next = r[0].next.token;
  }
}
if (request.text !== undefined) out.tokenized = Array.from(model.tokenize(request.text, false));

console.log(JSON.stringify(out));
await context.dispose();
await model.dispose();
await llama.dispose();
