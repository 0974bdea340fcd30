// lesfarm dashboard: vanilla JS over the REST API (/v1). No framework, no
// CDN; charts are inline SVG. Every value from the API is inserted as text,
// never as HTML.
'use strict';

const $ = (sel, root = document) => root.querySelector(sel);
const SVG = 'http://www.w3.org/2000/svg';
const PALETTE = ['#2563eb', '#dc2626', '#16a34a', '#9333ea', '#ea580c', '#0891b2', '#be185d', '#4d7c0f', '#7c3aed', '#b45309'];

function token() { return localStorage.getItem('lesfarm_token') || ''; }

// api GETs a path with query params and returns the decoded JSON, or throws
// an Error carrying the problem+json detail and field errors.
async function api(path, params) {
  const url = new URL(path, location.origin);
  for (const [k, v] of Object.entries(params || {})) {
    if (v === undefined || v === null || v === '') continue;
    url.searchParams.set(k, v);
  }
  const headers = { Accept: 'application/json' };
  if (token()) headers.Authorization = 'Bearer ' + token();
  const resp = await fetch(url, { headers });
  if (!resp.ok) {
    let msg = resp.status + ' ' + resp.statusText;
    try {
      const p = await resp.json();
      msg = (p.title || msg) + (p.detail ? ': ' + p.detail : '');
      for (const e of p.errors || []) msg += '; ' + (e.location ? e.location + ': ' : '') + e.message;
    } catch (_) { /* not JSON */ }
    throw new Error(msg);
  }
  return resp.json();
}

function el(tag, attrs, ...children) {
  const n = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === 'class') n.className = v; else n.setAttribute(k, v);
  }
  for (const c of children) n.append(c instanceof Node ? c : document.createTextNode(c == null ? '' : String(c)));
  return n;
}

function svg(tag, attrs, ...children) {
  const n = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) n.setAttribute(k, v);
  for (const c of children) n.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return n;
}

function setStatus(msg, bad) {
  const s = $('#status');
  s.textContent = msg || '';
  s.className = bad ? 'bad' : 'muted';
}

function fmtTime(s) {
  if (!s) return '';
  const d = new Date(s);
  return isNaN(d) ? s : d.toISOString().replace('T', ' ').slice(0, 16);
}

function fmtNum(v) {
  if (v === undefined || v === null || isNaN(v)) return '';
  const a = Math.abs(v);
  if (a !== 0 && (a >= 1e6 || a < 1e-3)) return v.toExponential(2);
  return String(Number(v.toPrecision(4)));
}

function fmtBytes(n) {
  if (!n) return '';
  const u = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  while (n >= 1024 && i < u.length - 1) { n /= 1024; i++; }
  return fmtNum(n) + ' ' + u[i];
}

function formParams(form) {
  const out = {};
  for (const [k, v] of new FormData(form)) if (v !== '') out[k] = v;
  return out;
}

// paged fills a table body from a cursor-paginated list endpoint.
function paged(path, tbody, moreBtn, row) {
  let cursor = '';
  let params = {};
  async function load(reset) {
    if (reset) { tbody.replaceChildren(); cursor = ''; }
    setStatus('loading…');
    try {
      const page = await api(path, { ...params, cursor });
      for (const item of page.items) tbody.append(row(item));
      cursor = page.next_cursor || '';
      moreBtn.hidden = !cursor;
      setStatus(tbody.children.length ? '' : 'nothing here yet');
    } catch (e) { setStatus(e.message, true); }
  }
  moreBtn.onclick = () => load(false);
  return { load: (p) => { params = p || {}; return load(true); } };
}

// ---- alerts ----
const alertsList = paged('/v1/alerts', $('#alerts-table tbody'), $('#alerts-more'), (g) => el('tr', { 'data-id': g.id },
  el('td', {}, g.id), el('td', {}, fmtTime(g.created_at)), el('td', {}, g.suite), el('td', {}, g.build || g.seq),
  el('td', { class: g.regression ? 'bad' : 'good' }, g.regression ? 'regression' : 'improvement'),
  el('td', {}, g.scope + (g.scope_detail ? ' (' + g.scope_detail + ')' : '')),
  el('td', { class: 'wrap' }, g.summary), el('td', {}, g.status)));
$('#alerts-filter').onsubmit = (ev) => { ev.preventDefault(); alertsList.load(formParams(ev.target)); };

// ---- runs ----
const runsList = paged('/v1/runs', $('#runs-table tbody'), $('#runs-more'), (r) => el('tr', { 'data-id': r.id },
  el('td', {}, r.id), el('td', {}, fmtTime(r.created_at)), el('td', {}, r.suite), el('td', {}, r.build),
  el('td', {}, r.device_id || r.target_device_id || ''), el('td', { class: 'state-' + r.state }, r.state),
  el('td', {}, r.state === 'running' ? Math.round(r.progress * 100) + '% ' + (r.progress_message || '') : ''),
  el('td', {}, r.attempts + '/' + r.max_attempts)));
$('#runs-filter').onsubmit = (ev) => { ev.preventDefault(); runsList.load(formParams(ev.target)); };

// ---- devices ----
const devicesList = paged('/v1/devices', $('#devices-table tbody'), $('#devices-more'), (d) => {
  const labels = Object.entries({ ...(d.agent_labels || {}), ...(d.labels || {}) }).map(([k, v]) => k + '=' + v).join(' ');
  return el('tr', { 'data-id': d.id },
    el('td', {}, d.id), el('td', {}, d.device_model + (d.emulated ? ' (emulated)' : '')), el('td', {}, d.platform),
    el('td', {}, d.os_version), el('td', {}, fmtBytes(d.ram_bytes)),
    el('td', { class: d.state === 'lost' ? 'bad' : '' }, d.state + (d.drained ? ', drained' : '')),
    el('td', { class: 'wrap' }, labels), el('td', {}, fmtTime(d.last_seen_at)));
});

// ---- series ----
let catalog = [];

function fillSelect(sel, values, keep, allLabel) {
  const prev = keep !== undefined ? keep : sel.value;
  sel.replaceChildren();
  if (allLabel) sel.append(el('option', { value: '' }, allLabel));
  for (const v of values) sel.append(el('option', { value: v }, v));
  if ([...sel.options].some((o) => o.value === prev)) sel.value = prev;
}

const uniq = (xs) => [...new Set(xs)].sort();

function syncSeriesSelectors(want) {
  const f = $('#series-filter');
  fillSelect(f.suite, uniq(catalog.map((k) => k.suite)), want.suite);
  const inSuite = catalog.filter((k) => k.suite === f.suite.value);
  fillSelect(f.metric, uniq(inSuite.map((k) => k.metric)), want.metric);
  fillSelect(f.config, uniq(inSuite.filter((k) => k.metric === f.metric.value).map((k) => k.config)), want.config, '(all configs)');
  if (want.last) f.last.value = want.last;
}

async function loadSeriesView(q) {
  try {
    catalog = (await api('/v1/series/catalog')).items;
  } catch (e) { setStatus(e.message, true); return; }
  if (!catalog.length) {
    setStatus('no series yet: results appear here once runs finish');
    $('#chart').replaceChildren();
    $('#series-table tbody').replaceChildren();
    return;
  }
  syncSeriesSelectors(q);
  await drawSeries();
}

async function drawSeries() {
  const f = $('#series-filter');
  const p = { suite: f.suite.value, metric: f.metric.value, config: f.config.value, last: f.last.value };
  history.replaceState(null, '', '#/series?' + new URLSearchParams(p));
  setStatus('loading…');
  let data;
  try { data = await api('/v1/series', p); } catch (e) { setStatus(e.message, true); return; }
  setStatus('');
  renderChart($('#chart'), data.series, p.metric);
  renderSeriesTable(data.series);
}

function seriesLabel(s, all) {
  let l = s.device_model || '(unknown model)';
  if (s.emulated) l += ' (emulated)';
  if (new Set(all.map((x) => x.os_major)).size > 1) l += ' OS ' + s.os_major;
  if (new Set(all.map((x) => x.config)).size > 1) l += ' · ' + s.config;
  if (new Set(all.map((x) => x.lineage)).size > 1) l += ' · ' + s.lineage;
  return l;
}

// renderChart draws one line per series: x is the build (ordered by
// sequence, shared across series), y the metric value.
function renderChart(root, series, metric) {
  const W = 960, H = 380, L = 64, R = 220, T = 16, B = 48;
  const seqs = uniq(series.flatMap((s) => s.points.map((pt) => pt.seq))).map(Number).sort((a, b) => a - b);
  const build = new Map();
  for (const s of series) for (const pt of s.points) if (pt.build) build.set(pt.seq, pt.build);
  const values = series.flatMap((s) => s.points.map((pt) => pt.value));
  const root$ = svg('svg', { viewBox: `0 0 ${W} ${H}`, role: 'img', 'aria-label': metric + ' by device model over builds', 'data-series': series.length, 'data-points': values.length });
  if (!values.length) {
    root$.append(svg('text', { x: W / 2, y: H / 2, 'text-anchor': 'middle' }, 'no points'));
    root.replaceChildren(root$);
    return;
  }
  let lo = Math.min(...values), hi = Math.max(...values);
  if (lo === hi) { lo -= Math.abs(lo) * 0.05 || 1; hi += Math.abs(hi) * 0.05 || 1; }
  const pad = (hi - lo) * 0.08;
  lo -= pad; hi += pad;
  const xi = new Map(seqs.map((s, i) => [s, i]));
  const x = (seq) => L + (seqs.length === 1 ? (W - L - R) / 2 : (xi.get(seq) / (seqs.length - 1)) * (W - L - R));
  const y = (v) => T + (1 - (v - lo) / (hi - lo)) * (H - T - B);
  // Grid and y ticks.
  for (let i = 0; i <= 5; i++) {
    const v = lo + ((hi - lo) * i) / 5;
    root$.append(svg('line', { class: 'grid', x1: L, x2: W - R, y1: y(v), y2: y(v) }));
    root$.append(svg('text', { x: L - 6, y: y(v) + 4, 'text-anchor': 'end' }, fmtNum(v)));
  }
  root$.append(svg('line', { class: 'axis', x1: L, x2: W - R, y1: H - B, y2: H - B }));
  root$.append(svg('line', { class: 'axis', x1: L, x2: L, y1: T, y2: H - B }));
  // x ticks: at most ~10 build labels.
  const every = Math.max(1, Math.ceil(seqs.length / 10));
  seqs.forEach((s, i) => {
    if (i % every !== 0 && i !== seqs.length - 1) return;
    const label = build.get(s) || String(s);
    root$.append(svg('text', { x: x(s), y: H - B + 16, 'text-anchor': 'middle' }, label.length > 14 ? label.slice(0, 13) + '…' : label));
  });
  root$.append(svg('text', { x: (L + W - R) / 2, y: H - 8, 'text-anchor': 'middle' }, 'build'));
  root$.append(svg('text', { x: 14, y: T + (H - T - B) / 2, transform: `rotate(-90 14 ${T + (H - T - B) / 2})`, 'text-anchor': 'middle' }, metric));
  // Lines, points, legend.
  const legend = svg('g', { class: 'legend' });
  series.forEach((s, i) => {
    const color = PALETTE[i % PALETTE.length];
    const label = seriesLabel(s, series);
    const d = s.points.map((pt, j) => (j ? 'L' : 'M') + x(pt.seq).toFixed(1) + ' ' + y(pt.value).toFixed(1)).join(' ');
    root$.append(svg('path', { class: 'series-line', d, stroke: color, 'data-device': s.device_model }));
    for (const pt of s.points) {
      const c = svg('circle', { cx: x(pt.seq).toFixed(1), cy: y(pt.value).toFixed(1), r: 3, fill: color });
      c.append(svg('title', {}, `${label}\nbuild ${pt.build || pt.seq}: ${fmtNum(pt.value)}` + (pt.stddev ? ` ± ${fmtNum(pt.stddev)}` : '') + (pt.n ? ` (n=${pt.n})` : '')));
      root$.append(c);
    }
    const ly = T + 14 + i * 18;
    legend.append(svg('rect', { x: W - R + 14, y: ly - 9, width: 12, height: 3, fill: color }));
    legend.append(svg('text', { x: W - R + 32, y: ly - 4 }, label));
  });
  root$.append(legend);
  root.replaceChildren(root$);
}

function renderSeriesTable(series) {
  const tb = $('#series-table tbody');
  tb.replaceChildren();
  for (const s of series) {
    const pts = s.points;
    const last = pts[pts.length - 1], prev = pts[pts.length - 2];
    let change = '', cls = '';
    if (last && prev && prev.value) {
      const rel = (last.value - prev.value) / Math.abs(prev.value);
      change = (rel >= 0 ? '+' : '') + (rel * 100).toFixed(1) + '%';
      cls = Math.abs(rel) < 0.02 ? '' : rel < 0 ? 'bad' : 'good';
    }
    tb.append(el('tr', { 'data-device': s.device_model },
      el('td', {}, s.device_model + (s.emulated ? ' (emulated)' : '')), el('td', {}, s.os_major), el('td', {}, s.config),
      el('td', {}, pts.length), el('td', {}, last ? last.build || last.seq : ''), el('td', { class: 'latest' }, last ? fmtNum(last.value) : ''),
      el('td', { class: cls }, change)));
  }
}

const seriesForm = $('#series-filter');
seriesForm.suite.onchange = () => { syncSeriesSelectors({}); drawSeries(); };
seriesForm.metric.onchange = () => { syncSeriesSelectors({ suite: seriesForm.suite.value }); drawSeries(); };
seriesForm.config.onchange = drawSeries;
seriesForm.last.onchange = drawSeries;
seriesForm.onsubmit = (ev) => { ev.preventDefault(); drawSeries(); };

// ---- router ----
const views = {
  alerts: (q) => { for (const [k, v] of Object.entries(q)) if ($('#alerts-filter')[k]) $('#alerts-filter')[k].value = v; return alertsList.load(formParams($('#alerts-filter'))); },
  series: (q) => loadSeriesView(q),
  runs: (q) => { for (const [k, v] of Object.entries(q)) if ($('#runs-filter')[k]) $('#runs-filter')[k].value = v; return runsList.load(formParams($('#runs-filter'))); },
  devices: () => devicesList.load({}),
};

function route() {
  const [path, query] = (location.hash.replace(/^#\/?/, '') || 'alerts').split('?');
  const name = views[path] ? path : 'alerts';
  for (const s of document.querySelectorAll('main > section')) s.hidden = s.id !== 'view-' + name;
  for (const a of document.querySelectorAll('nav a')) a.classList.toggle('active', a.dataset.view === name);
  document.body.dataset.view = name;
  views[name](Object.fromEntries(new URLSearchParams(query || '')));
}

$('#token-button').onclick = () => {
  const t = prompt('API token (kept in this browser only; needed when the coordinator requires tokens for reads). Empty to clear:', token());
  if (t === null) return;
  if (t) localStorage.setItem('lesfarm_token', t.trim()); else localStorage.removeItem('lesfarm_token');
  route();
};

window.addEventListener('hashchange', route);
route();
