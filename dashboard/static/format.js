// format.js: how numbers, units and times are shown. Pure functions, so
// the browser test can check them directly.

const MINUS = '\u2212';

// METRICS mirrors coordinator/regress: label, unit kind and direction.
export const METRICS = {
  decode_tps: { label: 'decode throughput', short: 'decode', unit: 'tps', higher: true },
  prefill_tps: { label: 'prefill throughput', short: 'prefill', unit: 'tps', higher: true },
  ttft_ms: { label: 'time to first token', short: 'TTFT', unit: 'ms', higher: false },
  peak_memory_bytes: { label: 'peak memory', short: 'peak memory', unit: 'bytes', higher: false },
  hit_rate: { label: 'expert cache hit rate', short: 'hit rate', unit: 'ratio', higher: true, les: true },
  predictor_recall: { label: 'predictor recall', short: 'predictor recall', unit: 'ratio', higher: true, les: true },
  stall_fraction: { label: 'stall fraction', short: 'stall fraction', unit: 'ratio', higher: false, les: true },
  bytes_per_token: { label: 'expert bytes read per token', short: 'bytes/token', unit: 'bytes_tok', higher: false, les: true },
};

export const METRIC_ORDER = Object.keys(METRICS);

const ALIASES = {
  decode_tok_s: 'decode_tps', decode: 'decode_tps', tps: 'decode_tps', prefill_tok_s: 'prefill_tps', prefill: 'prefill_tps',
  ttft: 'ttft_ms', peak_memory: 'peak_memory_bytes', peak_mem: 'peak_memory_bytes', hitrate: 'hit_rate', cache_hit_rate: 'hit_rate',
  recall: 'predictor_recall', prediction_recall: 'predictor_recall', stall: 'stall_fraction', stall_share: 'stall_fraction',
  bytes_per_tok: 'bytes_per_token',
};

// splitMetric: "predictor_recall.l12" → {base: "predictor_recall", layer: 12}.
export function splitMetric(name) {
  let base = String(name || '').trim().toLowerCase(), layer = -1;
  const m = /^(.*)\.l(\d+)$/.exec(base);
  if (m && m[1]) { base = m[1]; layer = Number(m[2]); }
  return { base: ALIASES[base] || base, layer };
}

export function metricInfo(name) {
  const { base, layer } = splitMetric(name);
  const info = METRICS[base] || { label: base, short: base, unit: '', higher: null };
  return { ...info, base, layer };
}

// metricLabel: "decode throughput (tok/s)", "predictor recall, layer 12".
export function metricLabel(name, withUnit = true) {
  const i = metricInfo(name);
  let l = i.label + (i.layer >= 0 ? ', layer ' + i.layer : '');
  const u = { tps: 'tok/s', ms: 'ms', bytes: 'bytes', bytes_tok: 'bytes/token' }[i.unit];
  if (withUnit && u) l += ' (' + u + ')';
  return l;
}

function isNum(v) { return typeof v === 'number' && Number.isFinite(v); }

// decimals picks the decimals that show 3 significant digits, at least 0.
export function decimals(v) {
  const a = Math.abs(v);
  if (!isNum(a) || a === 0) return 0;
  if (a >= 100) return 0;
  return Math.min(6, Math.max(0, 2 - Math.floor(Math.log10(a))));
}

// fmtNum: 3 significant digits, all integer digits, thousands separators,
// a real minus sign. Non-finite values are "—".
export function fmtNum(v, d) {
  if (!isNum(v)) return '—';
  const dd = d === undefined ? decimals(v) : d;
  let s = Math.abs(v).toLocaleString('en-US', { minimumFractionDigits: dd, maximumFractionDigits: dd });
  if (/^[0.,]+$/.test(s) || v >= 0) return s;
  return MINUS + s;
}

const BIN = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];

// byteScale returns the binary unit that suits v.
function byteScale(v) {
  let i = 0, a = Math.abs(v);
  while (a >= 1024 && i < BIN.length - 1) { a /= 1024; i++; }
  return { div: 1024 ** i, unit: BIN[i] };
}

export function fmtBytes(n) {
  if (!isNum(n)) return '—';
  const { div, unit } = byteScale(n);
  return fmtNum(n / div, unit === 'B' ? 0 : undefined) + ' ' + unit;
}

// scaleFor returns how to show values of metric near ref: divide by div,
// append unit. Ratios keep 3 decimals so they match the alert summaries
// ("predictor recall 0.82→0.64").
export function scaleFor(metric, ref) {
  const u = metricInfo(metric).unit;
  switch (u) {
    case 'tps': return { div: 1, unit: 'tok/s' };
    case 'ms': return Math.abs(ref) >= 1000 ? { div: 1000, unit: 's' } : { div: 1, unit: 'ms' };
    case 'bytes': return byteScale(ref);
    case 'bytes_tok': { const b = byteScale(ref); return { div: b.div, unit: b.unit + '/tok' }; }
    case 'ratio': return { div: 1, unit: '', ratio: true };
    default: return { div: 1, unit: '' };
  }
}

function withUnit(text, unit) { return unit ? text + ' ' + unit : text; }

function ratioDigits(v) { return Math.abs(v) >= 0.01 || v === 0 ? 3 : decimals(v); }

// fmtValue formats one value of metric with its unit: "27.3 tok/s",
// "1.24 s", "3.50 GiB", "0.823".
export function fmtValue(metric, v) {
  if (!isNum(v)) return '—';
  const sc = scaleFor(metric, v);
  if (sc.ratio) return fmtNum(v, ratioDigits(v));
  return withUnit(fmtNum(v / sc.div), sc.unit);
}

// fmtMeanSD: "27.25 ± 0.30 tok/s". Mean and stddev share their decimals:
// the stddev's two significant digits set them (the mean is as precise as
// its spread allows), within the mean's usual 3 significant digits + 2.
// A zero or missing stddev is left out.
export function fmtMeanSD(metric, mean, sd) {
  if (!isNum(mean)) return '—';
  const sc = scaleFor(metric, mean);
  const mv = mean / sc.div;
  const md = sc.ratio ? ratioDigits(mean) : decimals(mv);
  if (!isNum(sd) || sd <= 0) return withUnit(fmtNum(mv, md), sc.unit);
  const sv = sd / sc.div;
  const sdd = Math.max(0, 1 - Math.floor(Math.log10(sv)));
  const d = Math.min(md + 2, Math.max(md, sdd));
  return withUnit(fmtNum(mv, d) + ' ± ' + fmtNum(sv, d), sc.unit);
}

// fmtAxis formats an axis tick with the given step: ticks share the
// decimals that represent the step exactly (2.5 → one decimal).
export function fmtAxis(v, step) {
  let d = 0;
  if (step > 0) {
    d = Math.max(0, -Math.floor(Math.log10(step) + 1e-9));
    while (d < 8 && Math.abs(step * 10 ** d - Math.round(step * 10 ** d)) > 1e-6 * step * 10 ** d) d++;
  }
  return fmtNum(v, d);
}

// fmtPct: relative change 0.0913 → "+9.1%", −0.135 → "−13.5%".
export function fmtPct(rel, signed = true) {
  if (typeof rel === 'number' && !Number.isFinite(rel) && !Number.isNaN(rel)) return (rel < 0 ? MINUS : '+') + '∞%';
  if (!isNum(rel)) return '—';
  const p = rel * 100, a = Math.abs(p);
  const d = a >= 100 ? 0 : 1;
  const txt = a.toFixed(d) + '%';
  if (Number(a.toFixed(d)) === 0) return '0' + (d ? '.0' : '') + '%';
  if (!signed) return txt;
  return (p < 0 ? MINUS : '+') + txt;
}

// fmtP: "p < 0.001", "p = 0.023".
export function fmtP(p) {
  if (!isNum(p)) return '—';
  if (p < 0.001) return 'p < 0.001';
  return 'p = ' + Number(p.toPrecision(2));
}

// fmtDuration: milliseconds → "850 ms", "4.2 s", "3 min 12 s", "2 h 05 min".
export function fmtDuration(ms) {
  if (!isNum(ms) || ms < 0) return '—';
  if (ms < 1000) return Math.round(ms) + ' ms';
  const s = ms / 1000;
  if (s < 60) return (s < 10 ? s.toFixed(1) : Math.round(s)) + ' s';
  const m = Math.floor(s / 60), rs = Math.round(s % 60);
  if (m < 60) return m + ' min' + (rs ? ' ' + rs + ' s' : '');
  const hh = Math.floor(m / 60), rm = m % 60;
  if (hh < 48) return hh + ' h' + (rm ? ' ' + String(rm).padStart(2, '0') + ' min' : '');
  return Math.floor(hh / 24) + ' d ' + (hh % 24) + ' h';
}

// parseGoDuration: a Go duration ("1h30m0s") in ms.
export const parseGoDuration = s => [...String(s).matchAll(/([\d.]+)(ms|h|m|s)/g)].reduce((t, [, n, u]) => t + n * { h: 36e5, m: 6e4, s: 1e3, ms: 1 }[u], 0);

// fmtTime: an RFC 3339 time as "2026-11-30 03:31 UTC".
export function fmtTime(iso) {
  if (!iso) return '—';
  const d = new Date(iso);
  if (Number.isNaN(d.getTime())) return String(iso);
  return d.toISOString().slice(0, 16).replace('T', ' ') + ' UTC';
}

// fmtAgo: "just now", "5 min ago", "3 h ago", "2 d ago".
export function fmtAgo(iso, now = Date.now()) {
  if (!iso) return '—';
  const t = new Date(iso).getTime();
  if (Number.isNaN(t)) return String(iso);
  const s = Math.round((now - t) / 1000);
  if (s < -5) return 'in ' + fmtDuration(-s * 1000);
  if (s < 45) return 'just now';
  if (s < 3600) return Math.round(s / 60) + ' min ago';
  if (s < 48 * 3600) return Math.round(s / 3600) + ' h ago';
  return Math.round(s / 86400) + ' d ago';
}

// shortSHA keeps 10 hex digits of a git sha.
export function shortSHA(sha) { return sha ? String(sha).slice(0, 10) : ''; }

// humanize: "infra_failed" → "infra failed".
export function humanize(s) { return String(s || '').replace(/_/g, ' '); }

// STATE_TIPS says what each run state means, for the badges' tooltips.
// build_failed is the build's own failure, infra_failed the farm's.
export const STATE_TIPS = {
  queued: 'waiting for a device that can run it',
  assigned: 'leased to a device that has not started it yet',
  running: 'running on its device',
  succeeded: 'finished with its results stored',
  failed: 'the benchmark failed (an error in the job or its results)',
  cancelled: 'cancelled before it finished',
  infra_failed: 'the farm failed (agent, device, network or lease), not the build; retried while attempts remain',
  build_failed: 'the build’s own failure: its executable crashed, broke the runner protocol or overran the RAM budget; not retried',
};

// stateTip is the tooltip of a run state.
export function stateTip(state) { return STATE_TIPS[state] || ''; }

// shortHash keeps 12 hex digits of an executable's sha256.
export function shortHash(sha) { return sha ? String(sha).slice(0, 12) : ''; }
