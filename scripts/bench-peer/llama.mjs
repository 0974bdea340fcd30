// llama.cpp through node-llama-cpp's prebuilt CPU build, measured the way
// llama-bench does: ppN = one batched decode of N prompt tokens from an
// empty context, tgN = N single-token decodes. Prints one JSON line with
// the CPU variant ggml loaded (libggml-cpu-<variant>.so), and pp/tg t/s
// per CPU-second of the process (pp_cpu_tps, tg_cpu_tps: user + system
// time, which other processes on a loaded host disturb less than wall time).
//   node llama.mjs MODEL THREADS [pp|tg|both] [N_PROMPT] [N_GEN] [mmap-decode]
// mmap-decode: decode tok/s after the prompt, with the kernel's read bytes
// per token (the capped run; resident runs report pp/tg t/s).
import {getLlama, LlamaLogLevel} from "node-llama-cpp";
import {readFileSync} from "node:fs";

const [modelPath, thrArg, what = "both", ppArg = "64", tgArg = "32"] = process.argv.slice(2);
const threads = Number(thrArg || 1), nPP = Number(ppArg), nTG = Number(tgArg);
const io = () => Number(/read_bytes: (\d+)/.exec(readFileSync("/proc/self/io", "utf8"))[1]);
const llama = await getLlama({gpu: false, build: "never", usePrebuiltBinaries: true, logLevel: LlamaLogLevel.warn});
const model = await llama.loadModel({modelPath, useMmap: true, useMlock: false, gpuLayers: 0});
const ctx = await model.createContext({contextSize: 256, threads, batchSize: Math.max(nPP, 32), sequences: 1});
const seq = ctx.getSequence();
// A fixed prompt of exactly nPP tokens (llama-bench uses random ids; the
// cost of a batch does not depend on which tokens it holds, only routing).
const text = "In the beginning God created the heaven and the earth. And the earth was without form, and void; and darkness was upon the face of the deep. ";
let prompt = [];
while (prompt.length < nPP) prompt = prompt.concat(model.tokenize(text));
prompt = prompt.slice(0, nPP);

// prefill: time from the call to the first sampled token (one batch of
// nPP tokens, then sampling one token); decode: the following nTG tokens.
async function run(gen) {
  await seq.clearHistory();
  let n = 0, t1 = 0, b1 = 0, c1 = null;
  const t0 = performance.now(), c0 = process.cpuUsage();
  for await (const _ of seq.evaluate(prompt, {temperature: 0})) {
    n++;
    if (n === 1) { t1 = performance.now(); b1 = io(); c1 = process.cpuUsage(); }
    if (n >= gen + 1) break;
  }
  const t2 = performance.now(), c2 = process.cpuUsage();
  const cs = (a, b) => (b.user + b.system - a.user - a.system) / 1e6;
  return {pp_s: (t1 - t0) / 1000, tg_s: (t2 - t1) / 1000, read_bytes: io() - b1, pp_cpu_s: cs(c0, c1), tg_cpu_s: cs(c1, c2)};
}
const out = {engine: "llama.cpp", release: "v0.5.0", threads, n_prompt: nPP, n_gen: nTG};
await run(2); // warm-up, as llama-bench
const r = await run(what === "pp" ? 0 : nTG);
if (what !== "tg") { out.pp_tps = Number((nPP / r.pp_s).toFixed(3)); out.pp_cpu_tps = Number((nPP / r.pp_cpu_s).toFixed(3)); }
if (what !== "pp") {
  out.tg_tps = Number((nTG / r.tg_s).toFixed(3));
  out.tg_cpu_tps = Number((nTG / r.tg_cpu_s).toFixed(3));
  out.read_bytes_per_token = Math.round(r.read_bytes / nTG);
}
// The CPU variant ggml chose: the libggml-cpu-<variant>.so this process mapped.
const maps = [...readFileSync("/proc/self/maps", "utf8").matchAll(/libggml-cpu-([a-z0-9_]+)\.so/g)].map(m => m[1]);
out.variant = [...new Set(maps)].join(",") || "unknown";
console.log(JSON.stringify(out));
await ctx.dispose(); await model.dispose(); await llama.dispose();
