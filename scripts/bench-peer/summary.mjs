// summary.mjs RESULTS.jsonl MODEL CAP: per test and thread count, the
// per-round ratio lesfarm / llama.cpp (rounds pair the two engines run
// back to back), with min, median, the median's distribution-free
// interval (medianCI) and max, as a llama-bench-style table:
// once on wall-clock t/s and once on t/s per CPU-second of each process
// (which other processes on a loaded host disturb less). When the rounds
// also ran a base lesfarm (BASE in peer.sh: an older build), a third table
// gives lesfarm / base per round, wall and per CPU-second.
import {readFileSync} from "node:fs";
const [file, model, cap] = process.argv.slice(2);
const rows = readFileSync(file, "utf8").split("\n").filter(Boolean).map(l => JSON.parse(l));
const med = a => { const s = [...a].sort((x, y) => x - y), n = s.length; return n ? (n % 2 ? s[(n - 1) / 2] : (s[n / 2 - 1] + s[n / 2]) / 2) : NaN; };
// medianCI is the distribution-free interval for the median of the
// per-round ratios (the sign test's): [s_k, s_(n+1-k)] of the sorted
// values, k the largest rank (at most n/2) with P(X < k) <= 2.5% for X ~
// Binomial(n, 1/2), and its exact coverage 1 - 2·P(X < k). Under 6
// rounds no rank reaches 95%: k = 1, the whole range, with the coverage
// it has (93.75% for 5 rounds).
function medianCI(a) {
  const s = [...a].sort((x, y) => x - y), n = s.length;
  if (n < 2) return null;
  let k = 1, c = 1, tail = 1 / 2 ** n; // tail = P(X < k), c = C(n, k - 1)
  while (k + 1 <= Math.floor(n / 2)) {
    c = c * (n - k + 1) / k; // C(n, k)
    const next = tail + c / 2 ** n; // P(X < k + 1)
    if (next > 0.025) break;
    tail = next;
    k++;
  }
  return {lo: s[k - 1], hi: s[n - k], coverage: 1 - 2 * tail};
}
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
    const ci = medianCI(ok);
    const cis = ci ? `${f(ci.lo)}–${f(ci.hi)} (${(100 * ci.coverage).toFixed(0)}%)` : "n/a";
    lines.push(`| ${kind} | ${test} | ${threads} | ${f(med(D.map(r => r[field]).filter(x => x > 0)))} | ${f(med(N.map(r => r[field]).filter(x => x > 0)))} | ${ratios.map(r => f(r)).join(", ")} | ${f(Math.min(...ok))} | ${f(med(ok))} | ${cis} | ${f(Math.max(...ok))} |`);
  }
  if (!lines.length) return;
  console.log(`\n${title}\n`);
  console.log(`| kind | test | threads | ${den} t/s (median) | ${num} t/s (median) | ${num}/${den} per round | min | median | median's interval (coverage) | max |`);
  console.log("| --- | --- | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: |");
  for (const l of lines) console.log(l);
}
table("lesfarm", "llama.cpp", "tps", "wall clock: lesfarm / llama.cpp");
table("lesfarm", "llama.cpp", "cpu_tps", "per CPU-second of each process: lesfarm / llama.cpp");
table("lesfarm", "lesfarm-base", "tps", "wall clock: lesfarm / lesfarm-base (BASE)");
table("lesfarm", "lesfarm-base", "cpu_tps", "per CPU-second: lesfarm / lesfarm-base (BASE)");
const errs = rows.filter(r => r.error);
for (const e of errs) console.log(`round ${e.round} ${e.engine} ${e.kind} ${e.test}: ${e.error}`);
