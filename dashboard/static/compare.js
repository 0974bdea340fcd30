// compare.js: two builds, or two devices on one build, side by side — the
// ladder of each side's configs, the key metrics and their deltas. The
// selection lives in the URL (/compare?suite=&a_build=&a_device=&b_build=&b_device=),
// so a link in a review opens the same comparison.

import * as api from './api.js';
import { h, empty, errorBox } from './dom.js';
import { fmtMeanSD, fmtValue, fmtPct } from './format.js';

// Metrics compared, and whether higher is better.
const METRICS = [
  ['decode_tps', true, (r) => r.decode_tps.mean, (r) => r.decode_tps.stddev],
  ['prefill_tps', true, (r) => r.prefill_tps.mean, (r) => r.prefill_tps.stddev],
  ['ttft_ms', false, (r) => r.ttft_ms.mean, (r) => r.ttft_ms.stddev],
  ['hit_rate', true, (r) => r.hit_rate],
  ['predictor_recall', true, (r) => r.predictor_recall],
  ['stall_fraction', false, (r) => r.stall_fraction],
  ['bytes_per_token', false, (r) => r.bytes_per_token],
];

// THRESHOLD is the relative change shown as a change (smaller is shown as
// unchanged): 2%, about the CV of a settled emulated series.
const THRESHOLD = 0.02;

// side loads the results of one side: the newest result per config of the
// suite on that build and device model.
async function side(suite, build, device) {
  const page = await api.listResults({ suite, build, device_model: device, limit: 1000 });
  const by = new Map();
  for (const r of page.items || []) if (!by.has(r.config_key)) by.set(r.config_key, r); // newest run first
  return by;
}

// verdict classifies a relative change for a metric.
export function verdict(rel, higherBetter) {
  if (!Number.isFinite(rel) || Math.abs(rel) < THRESHOLD) return 'same';
  return (rel > 0) === higherBetter ? 'better' : 'worse';
}

function cell(metric, r, sd) {
  if (!r) return h('td', { class: 'r num muted' }, '—');
  const v = METRICS.find((m) => m[0] === metric);
  const val = v[2](r);
  return h('td', { class: 'r num' }, sd && v[3] ? fmtMeanSD(metric, val, v[3](r)) : fmtValue(metric, val));
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
  const list = (id, vals) => h('datalist', { id }, vals.map((v) => h('option', { value: v })));
  const input = (name, label, listID) => h('label', {}, label, h('input', { name, value: f[name], list: listID, autocomplete: 'off', spellcheck: 'false' }));
  const form = h('form', { class: 'filters compare-form' },
    list('cmp-builds', builds), list('cmp-models', models), list('cmp-suites', suites),
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
    h('p', { class: 'lede' }, 'Two builds on one device model, or two device models on one build: the ladder of each side and the change of every key metric. Changes under 2% are shown as unchanged.')),
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
  const th = (t, r) => h('th', { class: r ? 'r' : '' }, t);
  const table = h('table', { class: 'data compare-table' },
    h('thead', {}, h('tr', {}, th('Config'), th('Metric'), th('A: ' + name(f.a_build, f.a_device), 1), th('B: ' + name(f.b_build, f.b_device), 1), th('B vs A', 1))),
    h('tbody', {}, keys.flatMap((k) => METRICS.map(([metric, hb, get], i) => {
      const a = A.get(k), b = B.get(k);
      const rel = a && b && get(a) ? get(b) / get(a) - 1 : NaN;
      const v = verdict(rel, hb);
      return h('tr', { 'data-config': k, 'data-metric': metric, class: 'cmp-' + v + (i === 0 ? ' cfg-first' : '') },
        i === 0 ? h('td', { class: 'mono small', rowspan: METRICS.length }, k) : null,
        h('td', {}, metric.replace(/_/g, ' ')),
        cell(metric, a, true), cell(metric, b, true),
        h('td', { class: 'r num delta' }, Number.isFinite(rel) ? (v === 'better' ? '▲ ' : v === 'worse' ? '▼ ' : '') + fmtPct(rel) : '—'));
    }))));
  out.append(h('section', { class: 'card' }, h('h3', {}, f.suite + ': A = ' + name(f.a_build, f.a_device) + ', B = ' + name(f.b_build, f.b_device)),
    h('div', { class: 'table-scroll' }, table),
    h('p', { class: 'muted small' }, 'Each side is the newest result per config of that build on that device model. ▲ better, ▼ worse (blue and orange, the Okabe–Ito pair, readable with any colour vision).')));
}
