// llama.cpp decode via node-llama-cpp, mmapped; reports decode tok/s and the
// kernel's read_bytes and major faults over decode: node bench.mjs MODEL GEN THREADS
import {getLlama, LlamaLogLevel} from "node-llama-cpp";
import {readFileSync} from "node:fs";
const io = () => { const m = /read_bytes: (\d+)/.exec(readFileSync("/proc/self/io", "utf8")); return Number(m[1]); };
const majflt = () => { const s = readFileSync("/proc/self/stat", "utf8"); return Number(s.slice(s.lastIndexOf(")") + 2).split(" ")[9]); };
const [modelPath, genArg, thrArg] = process.argv.slice(2);
const gen = Number(genArg || 32), threads = Number(thrArg || 1);
const llama = await getLlama({gpu: false, build: "never", usePrebuiltBinaries: true, logLevel: LlamaLogLevel.warn});
const model = await llama.loadModel({modelPath, useMmap: true, useMlock: false, gpuLayers: 0});
const ctx = await model.createContext({contextSize: 256, threads, batchSize: 32, sequences: 1});
const seq = ctx.getSequence();
const prompt = model.tokenize("In the beginning God created the heaven and the earth.");
let n = 0, tFirst = 0, b0 = 0, f0 = 0; const toks = [];
const tStart = performance.now();
for await (const tok of seq.evaluate(prompt, {temperature: 0})) {
  n++; toks.push(tok);
  if (n === 1) { tFirst = performance.now(); b0 = io(); f0 = majflt(); }
  if (n >= gen + 1) break;
}
const tEnd = performance.now(), b1 = io(), f1 = majflt();
console.log(JSON.stringify({threads, gen, ttft_ms: Math.round(tFirst - tStart), decode_tps: Number((gen / ((tEnd - tFirst) / 1000)).toFixed(4)), ms_per_token: Number(((tEnd - tFirst) / gen).toFixed(2)), read_bytes_per_token: Math.round((b1 - b0) / gen), majflt_per_token: Number(((f1 - f0) / gen).toFixed(1)), tokens: toks.slice(0, 8)}));
await ctx.dispose(); await model.dispose(); await llama.dispose();
