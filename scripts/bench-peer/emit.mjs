// emit.mjs ROUND KIND THREADS ENGINE: reads one engine's JSON output on
// stdin (llama.mjs, lesfarm bench --format json or lesfarm generate
// --format json) and prints one JSON line per measured test:
// {round, kind, test, threads, engine, tps, cpu_tps, ...} (cpu_tps: t/s
// per CPU-second of the process, where the engine reports it). Empty or
// broken input (a crash, an OOM kill) prints a line with tps 0 and the
// error.
const [round, kind, threads, engine] = process.argv.slice(2);
let s = "";
process.stdin.on("data", d => s += d).on("end", () => {
  const base = {round: Number(round), kind, threads: Number(threads), engine};
  if (process.env.PEER_LOAD) base.load = Number(process.env.PEER_LOAD); // the round's load average
  const put = (test, tps, extra = {}) => console.log(JSON.stringify({...base, test, tps, ...extra}));
  let j;
  try { j = JSON.parse(s); } catch { // llama.mjs: the last line
    try { j = JSON.parse(s.trim().split("\n").pop()); } catch {
      put(kind === "capped" ? "decode" : "pp64", 0, {error: "no result (crashed or killed)"});
      return;
    }
  }
  if (j.rows) { // lesfarm bench
    for (const r of j.rows) put(r.test, r.tokens_per_second, {cpu_tps: r.tokens_per_cpu_second});
  } else if (j.decode_tokens_per_second !== undefined) { // lesfarm generate
    put("decode", j.decode_tokens_per_second, {read_bytes_per_token: j.bytes_read_per_token, mode: j.mode});
  } else if (j.engine === "llama.cpp") {
    const extra = {variant: j.variant, release: j.release};
    if (kind === "capped") put("decode", j.tg_tps, {...extra, read_bytes_per_token: j.read_bytes_per_token});
    else {
      put(`pp${j.n_prompt}`, j.pp_tps, {...extra, cpu_tps: j.pp_cpu_tps});
      put(`tg${j.n_gen}`, j.tg_tps, {...extra, cpu_tps: j.tg_cpu_tps});
    }
  } else put("unknown", 0, {error: "unrecognised output"});
});
