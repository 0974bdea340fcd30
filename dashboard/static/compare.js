// compare.js: two builds, or two devices on one build, side by side — the
// ladder of each side's configs, the key metrics and their deltas. The
// selection lives in the URL (/compare?suite=&a_build=&a_device=&b_build=&b_device=),
// so a link in a review opens the same comparison.

import * as api from './api.js';
import { h, empty, errorBox } from './dom.js';
import { fmtMeanSD, fmtValue, fmtPct } from './format.js';
import { buildLabels } from './chart.js';

// Metrics compared, and whether higher is better; the timings have a
// mean ± stddev over n repetitions, the LES ratios one value per run.
const METRICS = [
  ['decode_tps', true, (r) => r.decode_tps],
  ['prefill_tps', true, (r) => r.prefill_tps],
  ['ttft_ms', false, (r) => r.ttft_ms],
  ['hit_rate', true, (r) => r.hit_rate],
  ['predictor_recall', true, (r) => r.predictor_recall],
  ['stall_fraction', false, (r) => r.stall_fraction],
  ['bytes_per_token', false, (r) => r.bytes_per_token],
];
const mean = (v) => (typeof v === 'object' && v ? v.mean : v);

// side loads the results of one side: the newest result per config of the
// suite on that build and device model.
async function side(suite, build, device) {
  const page = await api.listResults({ suite, build, device_model: device, limit: 1000 });
  const by = new Map();
  for (const r of page.items || []) if (!by.has(r.config_key)) by.set(r.config_key, r); // newest run first
  return by;
}

// T975 is Student's t 0.975 quantile for 1…30 degrees of freedom.
const T975 = [12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.16, 2.145, 2.131, 2.12, 2.11, 2.101, 2.093, 2.086, 2.08, 2.074, 2.069, 2.064, 2.06, 2.056, 2.052, 2.048, 2.045, 2.042];

// welch returns the 95% Welch t interval [lo, hi] of mean(b) − mean(a) for
// two {mean, stddev, n}, or null without a spread on either side (n < 2):
// df by Welch–Satterthwaite, rounded down (the wider interval).
export function welch(a, b) {
  if (!a || !b || !(a.n >= 2) || !(b.n >= 2) || !Number.isFinite(a.stddev) || !Number.isFinite(b.stddev)) return null;
  const va = a.stddev ** 2 / a.n, vb = b.stddev ** 2 / b.n, se = Math.sqrt(va + vb), d = b.mean - a.mean;
  if (se === 0) return [d, d];
  const df = Math.floor((va + vb) ** 2 / (va ** 2 / (a.n - 1) + vb ** 2 / (b.n - 1)));
  const t = df <= 30 ? T975[Math.max(1, df) - 1] : 1.96 + 2.4 / df;
  return [d - t * se, d + t * se];
}

// verdict judges B against A by the interval of their difference: better
// or worse when it excludes zero, noise when it holds zero, and nospread
// when a side has no spread to judge by (a value measured once per run).
export function verdict(ci, higherBetter) {
  if (!ci) return 'nospread';
  if (ci[0] <= 0 && ci[1] >= 0) return 'noise';
  return (ci[0] > 0) === higherBetter ? 'better' : 'worse';
}

function cell(metric, r) {
  if (!r) return h('td', { class: 'r num muted' }, '—');
  const v = METRICS.find((m) => m[0] === metric)[2](r);
  return h('td', { class: 'r num' }, typeof v === 'object' && v ? fmtMeanSD(metric, v.mean, v.stddev) : fmtValue(metric, v));
}

// render is /compare.
export async function render(root, q, ctx) {
  ctx.title('Compare');
  const f = Object.fromEntries(['suite', 'a_build', 'a_device', 'b_build', 'b_device'].map((k) => [k, q.get(k) || '']));
  if (!f.b_device) f.b_device = f.a_device;
  let devices = [], runs = [];
  try {
    [devices, runs] = await Promise.all([api.listDevices({ limit: 1000 }), api.listRuns({ lineage: '*', limit: 200 })]);
  } catch (e) {
    root.replaceChildren(errorBox(e, 'devices and runs'));
    return;
  }
  const models = [...new Set((devices.items || []).map((d) => d.device_model).filter(Boolean))].sort();
  const builds = [...new Set((runs.items || []).map((r) => r.build))];
  const suites = [...new Set((runs.items || []).map((r) => r.suite))].sort();
  // Build options are labelled by their distinguishing part (builds of one
  // lineage share a long prefix); an input shows its whole value on hover.
  const list = (id, vals, labels = vals) => h('datalist', { id }, vals.map((v, i) => h('option', { value: v, label: labels[i] })));
  const input = (name, label, listID) => {
    const el = h('input', { name, value: f[name], list: listID, autocomplete: 'off', spellcheck: 'false', title: f[name] });
    el.addEventListener('input', () => { el.title = el.value; });
    return h('label', { class: 'cmp-' + name.replace(/^[ab]_/, '') }, label, el);
  };
  const form = h('form', { class: 'filters compare-form' },
    list('cmp-builds', builds, buildLabels(builds)), list('cmp-models', models), list('cmp-suites', suites),
    input('suite', 'suite', 'cmp-suites'),
    h('fieldset', {}, h('legend', {}, 'A'), input('a_build', 'build', 'cmp-builds'), input('a_device', 'device model', 'cmp-models')),
    h('fieldset', {}, h('legend', {}, 'B'), input('b_build', 'build', 'cmp-builds'), input('b_device', 'device model', 'cmp-models')),
    h('button', { class: 'btn btn-primary', type: 'submit' }, 'Compare'));
  form.addEventListener('submit', (ev) => {
    ev.preventDefault();
    const p = new URLSearchParams();
    for (const e of form.elements) if (e.name && e.value.trim()) p.set(e.name, e.value.trim());
    ctx.navigate('/compare?' + p);
  });
  const out = h('div', { class: 'compare-out' });
  root.replaceChildren(h('div', { class: 'view-head' }, h('h2', {}, 'Compare'),
    h('p', { class: 'lede' }, 'Two builds on one device model, or two device models on one build: the ladder of each side and the change of every key metric. A change is flagged only when the 95% interval of the difference (Welch t, over the repetitions) excludes zero.')),
    h('section', { class: 'card' }, form), out);
  if (!f.suite || !f.a_build || !f.b_build || !f.a_device) {
    out.append(empty('Pick a suite, two builds and a device model (or one build and two device models).', h('p', {}, 'For example build A = last night\'s, build B = tonight\'s, both on Pixel 8.')));
    return;
  }
  let A, B;
  try {
    [A, B] = await Promise.all([side(f.suite, f.a_build, f.a_device), side(f.suite, f.b_build, f.b_device)]);
  } catch (e) {
    out.append(errorBox(e, 'results'));
    return;
  }
  if (!A.size && !B.size) {
    out.append(empty('Neither side has results.', h('p', {}, 'Check the suite, build and device model names.')));
    return;
  }
  const keys = [...new Set([...A.keys(), ...B.keys()])];
  // Configs in A's order, then any only B ran, in B's.
  const rank = (k) => (A.has(k) ? A.get(k).config_index : 10000 + B.get(k).config_index);
  keys.sort((x, y) => rank(x) - rank(y));
  const name = (b, d) => b + ' · ' + d;
  const [sa, sb] = f.a_build === f.b_build ? [f.a_build, f.b_build] : buildLabels([f.a_build, f.b_build]);
  const th = (t, r, title) => h('th', { class: r ? 'r' : '', title }, t);
  const table = h('table', { class: 'data compare-table' },
    h('thead', {}, h('tr', {}, th('Config'), th('Metric'), th('A: ' + name(sa, f.a_device), 1, name(f.a_build, f.a_device)),
      th('B: ' + name(sb, f.b_device), 1, name(f.b_build, f.b_device)), th('B vs A', 1))),
    h('tbody', {}, keys.flatMap((k) => METRICS.map(([metric, hb, get], i) => {
      const a = A.get(k), b = B.get(k);
      const va = a && get(a), vb = b && get(b);
      const rel = va && vb && mean(va) ? mean(vb) / mean(va) - 1 : NaN;
      const n = (r, x) => ({ mean: x.mean, stddev: x.stddev, n: x.n || r.repetitions });
      const ci = typeof va === 'object' && vb ? welch(n(a, va), n(b, vb)) : null;
      const v = Number.isFinite(rel) ? verdict(ci, hb) : 'none';
      const why = ci ? 'B − A: 95% Welch interval ' + fmtValue(metric, ci[0]) + ' to ' + fmtValue(metric, ci[1]) : 'measured once per run: no spread to judge the change by';
      return h('tr', { 'data-config': k, 'data-metric': metric, class: 'cmp-' + v + (i === 0 ? ' cfg-first' : '') },
        i === 0 ? h('td', { class: 'mono small', rowspan: METRICS.length }, k) : null,
        h('td', {}, metric.replace(/_/g, ' ')),
        cell(metric, a), cell(metric, b),
        h('td', { class: 'r num delta', title: Number.isFinite(rel) ? why : '' }, Number.isFinite(rel) ? (v === 'better' ? '▲ ' : v === 'worse' ? '▼ ' : '') + fmtPct(rel) : '—',
          v === 'noise' ? h('span', { class: 'muted small' }, ' within noise') : null));
    }))));
  out.append(h('section', { class: 'card' }, h('h3', {}, f.suite + ': A = ' + name(f.a_build, f.a_device) + ', B = ' + name(f.b_build, f.b_device)),
    h('div', { class: 'table-scroll' }, table),
    h('p', { class: 'muted small' }, 'Each side is the newest result per config of that build on that device model. ▲ better, ▼ worse (blue and orange, the Okabe–Ito pair, readable with any colour vision): the 95% Welch t interval of B − A excludes zero. "within noise": it holds zero. Hit rate, recall, stall and bytes per token are one value per run, with no spread to judge by: their change is shown without a verdict (hover for the interval).')));
}
