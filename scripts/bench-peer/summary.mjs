// summary.mjs RESULTS.jsonl MODEL CAP: per test and thread count, the
// per-round ratio lesfarm / llama.cpp (rounds pair the two engines run
// back to back), with min, median and max, as a llama-bench-style table:
// once on wall-clock t/s and once on t/s per CPU-second of each process
// (which other processes on a loaded host disturb less). When the rounds
// also ran a base lesfarm (BASE in peer.sh: an older build), a third table
// gives lesfarm / base per round, wall and per CPU-second.
import {readFileSync} from "node:fs";
const [file, model, cap] = process.argv.slice(2);
const rows = readFileSync(file, "utf8").split("\n").filter(Boolean).map(l => JSON.parse(l));
const med = a => { const s = [...a].sort((x, y) => x - y), n = s.length; return n ? (n % 2 ? s[(n - 1) / 2] : (s[n / 2 - 1] + s[n / 2]) / 2) : NaN; };
const f = (x, d = 2) => Number.isFinite(x) ? x.toFixed(d) : "n/a";
const variants = [...new Set(rows.filter(r => r.engine === "llama.cpp" && r.variant).map(r => `${r.kind}: ${r.variant}`))];
const release = rows.find(r => r.release)?.release ?? "?";
console.log(`\nmodel ${model}; cap ${(Number(cap) / 2 ** 20).toFixed(0)} MiB, read-ahead 128 KiB (capped rows)`);
console.log(`llama.cpp ${release} (node-llama-cpp prebuilt CPU), CPU variant that ran: ${variants.join("; ") || "?"}`);
console.log("capped: llama.cpp mmap (repack off) vs lesfarm scheduled, --storage direct, --expert-budget 20%, 1 thread");
const loads = rows.filter(r => r.load !== undefined);
if (loads.length) console.log(`load average (1 min) at each round's start: ${[...new Set(loads.map(r => `${r.round}: ${r.load}`))].join(", ")}`);
const keys = [...new Set(rows.map(r => `${r.kind}|${r.test}|${r.threads}`))];
// table prints num/den per round for the field (tps or cpu_tps).
function table(num, den, field, title) {
  const lines = [];
  for (const k of keys) {
    const [kind, test, threads] = k.split("|");
    const of = e => rows.filter(r => r.kind === kind && r.test === test && String(r.threads) === threads && r.engine === e);
    const D = of(den), N = of(num);
    if (!D.length || !N.length || !N.some(r => r[field] > 0)) continue;
    const ratios = [];
    for (const g of N) {
      const l = D.find(r => r.round === g.round);
      ratios.push(l && l[field] > 0 && g[field] > 0 ? g[field] / l[field] : NaN);
    }
    const ok = ratios.filter(Number.isFinite);
    lines.push(`| ${kind} | ${test} | ${threads} | ${f(med(D.map(r => r[field]).filter(x => x > 0)))} | ${f(med(N.map(r => r[field]).filter(x => x > 0)))} | ${ratios.map(r => f(r)).join(", ")} | ${f(Math.min(...ok))} | ${f(med(ok))} | ${f(Math.max(...ok))} |`);
  }
  if (!lines.length) return;
  console.log(`\n${title}\n`);
  console.log(`| kind | test | threads | ${den} t/s (median) | ${num} t/s (median) | ${num}/${den} per round | min | median | max |`);
  console.log("| --- | --- | ---: | ---: | ---: | --- | ---: | ---: | ---: |");
  for (const l of lines) console.log(l);
}
table("lesfarm", "llama.cpp", "tps", "wall clock: lesfarm / llama.cpp");
table("lesfarm", "llama.cpp", "cpu_tps", "per CPU-second of each process: lesfarm / llama.cpp");
table("lesfarm", "lesfarm-base", "tps", "wall clock: lesfarm / lesfarm-base (BASE)");
table("lesfarm", "lesfarm-base", "cpu_tps", "per CPU-second: lesfarm / lesfarm-base (BASE)");
const errs = rows.filter(r => r.error);
for (const e of errs) console.log(`round ${e.round} ${e.engine} ${e.kind} ${e.test}: ${e.error}`);
