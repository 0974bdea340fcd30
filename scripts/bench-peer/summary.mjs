// summary.mjs RESULTS.jsonl MODEL CAP: per test and thread count, the
// per-round ratio lesfarm / llama.cpp (rounds pair the two engines run
// back to back), with min, median and max, as a llama-bench-style table.
import {readFileSync} from "node:fs";
const [file, model, cap] = process.argv.slice(2);
const rows = readFileSync(file, "utf8").split("\n").filter(Boolean).map(l => JSON.parse(l));
const med = a => { const s = [...a].sort((x, y) => x - y), n = s.length; return n ? (n % 2 ? s[(n - 1) / 2] : (s[n / 2 - 1] + s[n / 2]) / 2) : NaN; };
const f = (x, d = 2) => Number.isFinite(x) ? x.toFixed(d) : "n/a";
const variants = [...new Set(rows.filter(r => r.engine === "llama.cpp" && r.variant).map(r => `${r.kind}: ${r.variant}`))];
const release = rows.find(r => r.release)?.release ?? "?";
console.log(`\nmodel ${model}; cap ${(Number(cap) / 2 ** 20).toFixed(0)} MiB, read-ahead 128 KiB (capped rows)`);
console.log(`llama.cpp ${release} (node-llama-cpp prebuilt CPU), CPU variant that ran: ${variants.join("; ") || "?"}`);
console.log("capped: llama.cpp mmap (repack off) vs lesfarm scheduled, --storage direct, --expert-budget 20%, 1 thread\n");
console.log("| kind | test | threads | llama.cpp t/s (median) | lesfarm t/s (median) | lesfarm/llama.cpp per round | min | median | max |");
console.log("| --- | --- | ---: | ---: | ---: | --- | ---: | ---: | ---: |");
const keys = [...new Set(rows.map(r => `${r.kind}|${r.test}|${r.threads}`))];
for (const k of keys) {
  const [kind, test, threads] = k.split("|");
  const of = e => rows.filter(r => r.kind === kind && r.test === test && String(r.threads) === threads && r.engine === e);
  const L = of("llama.cpp"), G = of("lesfarm");
  const ratios = [];
  for (const g of G) {
    const l = L.find(r => r.round === g.round);
    ratios.push(l && l.tps > 0 && g.tps > 0 ? g.tps / l.tps : NaN);
  }
  const ok = ratios.filter(Number.isFinite);
  console.log(`| ${kind} | ${test} | ${threads} | ${f(med(L.map(r => r.tps).filter(x => x > 0)))} | ${f(med(G.map(r => r.tps).filter(x => x > 0)))} | ${ratios.map(r => f(r)).join(", ")} | ${f(Math.min(...ok))} | ${f(med(ok))} | ${f(Math.max(...ok))} |`);
}
const errs = rows.filter(r => r.error);
for (const e of errs) console.log(`round ${e.round} ${e.engine} ${e.kind} ${e.test}: ${e.error}`);
