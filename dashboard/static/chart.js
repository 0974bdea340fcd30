// chart.js: an SVG line chart of series over builds, drawn by hand.
//
// x is the build: the ordered union of the series' sequence numbers, one
// slot per build, so builds without a point for a series leave no gap in
// the axis. y is the metric, auto-scaled (or from zero), in the metric's
// unit. Each series gets its line, its points and a ±stddev band (the
// spread of the repetitions behind each point); change points are dashed
// vertical markers. Hovering shows every series' value at that build.

import { h, s } from './dom.js';
import { fmtAxis, fmtMeanSD, metricLabel, scaleFor, fmtPct } from './format.js';

// PALETTE: Okabe–Ito (colour-blind safe), then a few darker extras.
export const PALETTE = ['#0072b2', '#e69f00', '#009e73', '#cc79a7', '#56b4e9', '#d55e00', '#6a3d9a', '#4d4d4d', '#b15928', '#1b9e77'];

function niceStep(span, count) {
  const raw = span / Math.max(1, count);
  const p = 10 ** Math.floor(Math.log10(raw));
  const f = raw / p;
  return (f <= 1 ? 1 : f <= 2 ? 2 : f <= 2.5 ? 2.5 : f <= 5 ? 5 : 10) * p;
}

// renderChart returns an element holding the chart. opts: series
// [{id, label, color, points: [{seq, value, stddev, n, build}]}], changes
// [{seq, direction, text, seriesIds: Set}], metric, zero (y from 0),
// width, height, lineage ('' or absent: the series may span lineages; a
// series' dash 1-3 draws its line dashed).
export function renderChart(opts) {
  const { series, changes = [], metric, zero = false } = opts;
  const W = Math.max(360, Math.round(opts.width || 960)), H = opts.height || 340;
  const L = 64, R = 18, T = 30, B = 46;
  const PW = W - L - R, PH = H - T - B;

  const seqs = [...new Set(series.flatMap((x) => x.points.map((p) => p.seq)))].sort((a, b) => a - b);
  const slot = new Map(seqs.map((q, i) => [q, i]));
  const builds = new Map();
  for (const x of series) for (const p of x.points) if (p.build && !builds.has(p.seq)) builds.set(p.seq, p.build);

  const wrap = h('div', { class: 'chart-wrap' });
  const svg = s('svg', {
    viewBox: `0 0 ${W} ${H}`, width: W, height: H, class: 'chart', role: 'img',
    'aria-label': metricLabel(metric) + ' by series over builds, ' + (opts.lineage ? 'lineage ' + opts.lineage : 'all lineages'),
  });
  wrap.append(svg);
  const vals = [];
  for (const x of series) for (const p of x.points) {
    vals.push(p.value);
    if (p.stddev > 0) vals.push(p.value - p.stddev, p.value + p.stddev);
  }
  if (!vals.length) {
    svg.append(s('text', { x: W / 2, y: H / 2, 'text-anchor': 'middle', class: 'muted-text' }, 'no points in these series yet'));
    return wrap;
  }
  let lo = Math.min(...vals), hi = Math.max(...vals);
  if (zero) { lo = Math.min(0, lo); hi = Math.max(0, hi); }
  if (lo === hi) { const d = Math.abs(lo) * 0.05 || 1; lo -= d; hi += d; }
  const sc = scaleFor(metric, Math.max(Math.abs(lo), Math.abs(hi)));
  const step = niceStep((hi - lo) / sc.div, 5) * sc.div;
  lo = Math.floor(lo / step) * step;
  hi = Math.ceil(hi / step) * step;
  if (zero && lo < 0 && Math.min(...vals) >= 0) lo = 0;

  const x = (q) => L + (seqs.length === 1 ? PW / 2 : (slot.get(q) / (seqs.length - 1)) * PW);
  const y = (v) => T + (1 - (v - lo) / (hi - lo)) * PH;
  const f1 = (v) => v.toFixed(1);

  // Grid, y ticks and the axis title (unit).
  const grid = s('g', { class: 'grid' });
  for (let v = lo, i = 0; v <= hi + step / 2 && i < 50; v += step, i++) {
    grid.append(s('line', { x1: L, x2: W - R, y1: f1(y(v)), y2: f1(y(v)) }));
    grid.append(s('text', { x: L - 8, y: f1(y(v) + 4), 'text-anchor': 'end', class: 'tick' }, fmtAxis(v / sc.div, step / sc.div)));
  }
  svg.append(grid);
  svg.append(s('text', { x: L, y: 14, class: 'axis-title' }, metricLabel(metric, false) + (sc.unit ? ' (' + sc.unit + ')' : '')));
  svg.append(s('line', { class: 'axis', x1: L, x2: W - R, y1: T + PH, y2: T + PH }));

  // x ticks: build names, thinned to fit without overlapping; the newest
  // build is always labelled.
  const labelOf = (q) => builds.get(q) || '#' + q;
  const short = (q) => { const l = labelOf(q); return l.length > 14 ? l.slice(0, 13) + '…' : l; };
  const widthOf = (q) => short(q).length * 6.4 + 10;
  const span = (q) => {
    const w = widthOf(q), cx = x(q);
    if (cx + w / 2 > W - 2) return [W - 2 - w, W - 2, 'end', W - 2];
    if (cx - w / 2 < 2) return [2, 2 + w, 'start', 2];
    return [cx - w / 2, cx + w / 2, 'middle', cx];
  };
  const maxW = Math.max(...seqs.map(widthOf));
  const every = Math.max(1, Math.ceil(maxW / (seqs.length > 1 ? PW / (seqs.length - 1) : PW)));
  const shown = [];
  const lastIdx = seqs.length - 1;
  for (let i = 0; i <= lastIdx; i += every) shown.push(i);
  if (shown[shown.length - 1] !== lastIdx) {
    while (shown.length && span(seqs[shown[shown.length - 1]])[1] > span(seqs[lastIdx])[0]) shown.pop();
    shown.push(lastIdx);
  }
  for (const i of shown) {
    const q = seqs[i];
    const [, , anchor, tx] = span(q);
    svg.append(s('line', { class: 'xtick', x1: f1(x(q)), x2: f1(x(q)), y1: T + PH, y2: T + PH + 4 }));
    svg.append(s('text', { x: f1(tx), y: T + PH + 18, 'text-anchor': anchor, class: 'tick' }, short(q)));
  }
  svg.append(s('text', { x: L + PW / 2, y: H - 6, 'text-anchor': 'middle', class: 'axis-note' }, 'build, oldest → newest'));

  // Change points, under the data.
  const marks = s('g', { class: 'changes' });
  const bySeq = new Map();
  for (const c of changes) {
    if (!slot.has(c.seq)) continue;
    if (!bySeq.has(c.seq)) bySeq.set(c.seq, []);
    bySeq.get(c.seq).push(c);
  }
  for (const [q, cs] of bySeq) {
    const reg = cs.some((c) => c.direction === 'regression');
    const cls = reg ? 'regression' : 'improvement';
    const g = s('g', { class: 'change change-' + cls, 'data-seq': q });
    g.append(s('line', { x1: f1(x(q)), x2: f1(x(q)), y1: T - 4, y2: T + PH }));
    const rels = cs.map((c) => c.rel).filter((r) => typeof r === 'number');
    const worst = rels.length ? rels.reduce((a, b) => (Math.abs(b) > Math.abs(a) ? b : a)) : null;
    const lab = (reg ? '▼ ' : '▲ ') + (worst === null ? 'change' : fmtPct(worst));
    const tx = Math.min(W - R - 4, Math.max(L + 4, x(q)));
    g.append(s('text', { x: f1(tx), y: T - 8, 'text-anchor': x(q) > W - R - 40 ? 'end' : x(q) < L + 40 ? 'start' : 'middle' }, lab));
    g.append(s('title', {}, cs.map((c) => c.text).join('\n')));
    marks.append(g);
  }
  svg.append(marks);

  // Bands, lines and points per series.
  const data = s('g', { class: 'data' });
  const ringed = new Set();
  for (const c of changes) for (const id of c.seriesIds || []) ringed.add(id + '@' + c.seq);
  for (const sr of series) {
    const g = s('g', { class: 'series', 'data-series-id': sr.id, 'data-device': sr.device_model || '', 'data-lineage': sr.lineage || '' });
    const pts = sr.points;
    const withSD = pts.filter((p) => p.stddev > 0);
    if (withSD.length) {
      const up = withSD.map((p, i) => (i ? 'L' : 'M') + f1(x(p.seq)) + ' ' + f1(y(p.value + p.stddev)));
      const down = withSD.slice().reverse().map((p) => 'L' + f1(x(p.seq)) + ' ' + f1(y(p.value - p.stddev)));
      const band = withSD.length === 1
        ? s('line', { class: 'band-bar', x1: f1(x(withSD[0].seq)), x2: f1(x(withSD[0].seq)), y1: f1(y(withSD[0].value + withSD[0].stddev)), y2: f1(y(withSD[0].value - withSD[0].stddev)), stroke: sr.color })
        : s('path', { class: 'band', d: up.join(' ') + ' ' + down.join(' ') + ' Z', fill: sr.color });
      g.append(band);
    }
    if (pts.length > 1) {
      g.append(s('path', { class: 'series-line' + (sr.dash > 0 ? ' dash-' + sr.dash : ''), stroke: sr.color, d: pts.map((p, i) => (i ? 'L' : 'M') + f1(x(p.seq)) + ' ' + f1(y(p.value))).join(' ') }));
    }
    for (const p of pts) {
      const ring = ringed.has(sr.id + '@' + p.seq);
      g.append(s('circle', { class: ring ? 'pt pt-change' : 'pt', cx: f1(x(p.seq)), cy: f1(y(p.value)), r: ring ? 4.5 : pts.length > 40 ? 1.6 : 2.6, fill: sr.color }));
    }
    data.append(g);
  }
  svg.append(data);

  // Hover: a guide line and a tooltip listing every series at that build.
  const guide = s('line', { class: 'guide', x1: 0, x2: 0, y1: T, y2: T + PH, visibility: 'hidden' });
  svg.append(guide);
  const tip = h('div', { class: 'tooltip', hidden: true });
  wrap.append(tip);
  const index = series.map((sr) => new Map(sr.points.map((p) => [p.seq, p])));
  const overlay = s('rect', { class: 'overlay', x: L, y: T, width: PW, height: PH });
  overlay.addEventListener('mousemove', (ev) => {
    const r = svg.getBoundingClientRect();
    const px = ((ev.clientX - r.left) / r.width) * W;
    const i = seqs.length === 1 ? 0 : Math.round(((px - L) / PW) * (seqs.length - 1));
    const q = seqs[Math.max(0, Math.min(seqs.length - 1, i))];
    guide.setAttribute('x1', f1(x(q)));
    guide.setAttribute('x2', f1(x(q)));
    guide.setAttribute('visibility', 'visible');
    const rows = [];
    series.forEach((sr, k) => {
      const p = index[k].get(q);
      if (!p) return;
      rows.push(h('div', { class: 'tip-row' }, h('span', { class: 'swatch', 'data-color': sr.color }), h('span', { class: 'tip-label' }, sr.label),
        h('span', { class: 'tip-val' }, fmtMeanSD(metric, p.value, p.stddev) + (p.n ? '  n=' + p.n : '') + (/^\d+$/.test(p.run || '') ? '  run #' + p.run : ''))));
    });
    const cs = bySeq.get(q) || [];
    tip.replaceChildren(h('div', { class: 'tip-head' }, 'build ' + labelOf(q), h('span', { class: 'muted' }, '  seq ' + q)), ...rows,
      ...cs.map((c) => h('div', { class: 'tip-change tip-' + c.direction }, c.text)));
    for (const sw of tip.querySelectorAll('.swatch')) sw.style.background = sw.dataset.color;
    tip.hidden = false;
    const left = (x(q) / W) * r.width;
    tip.style.left = (left > r.width * 0.6 ? left - tip.offsetWidth - 12 : left + 12) + 'px';
    tip.style.top = '36px';
  });
  overlay.addEventListener('mouseleave', () => { tip.hidden = true; guide.setAttribute('visibility', 'hidden'); });
  svg.append(overlay);
  return wrap;
}
