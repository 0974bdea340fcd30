// chart.js: the line chart of series over builds, drawn by uPlot (see
// plot.js and vendor/VENDOR.md).
//
// x is the build: the union of the series' sequence numbers in build
// order (buildOrder: by the build's position in its lineage, as the API
// orders each series), one slot per build, so builds without a point for
// a series leave no gap in the axis. y is the metric, auto-scaled to the builds in view (or from
// zero), in the metric's unit. Each series gets its line, its points and a
// ±stddev band (the spread of the repetitions behind each point, drawn on
// the canvas under the lines); change points are dashed vertical markers,
// kept as elements over the canvas so they can be read and linked. Drag
// across the chart to zoom into those builds, double-click to zoom out;
// hovering shows every series' value at that build.
//
// The chart element (.chart) carries its uPlot instance as .plot, and
// .drawn records what the last draw put on the canvas (bands, ringed
// points), .meta names each series (id, lineage, device) and .slots the
// build of each x slot, in order, so tests can
// check the canvas without reading pixels.

import { h } from './dom.js';
import { fmtAxis, fmtMeanSD, fmtValue, metricLabel, scaleFor, fmtPct, shortHash, shortSHA } from './format.js';
import { PALETTE } from './plot.js';

export { PALETTE };

// meas measures axis labels.
const meas = document.createElement('canvas').getContext('2d');

// DASHES are the line patterns of lineages after the first (dash 1–3).
const DASHES = [null, [7, 4], [2, 3], [9, 3, 2, 3]];

// buildOrder returns the distinct seqs of the series' points in build
// order, as coordinator/store BuildOrder does for one series: by the
// point's build_position, then seq; a point without one (a label that is
// not a registered build of the lineage) takes the highest position seen
// at a smaller seq, so it sits after the newest build that had run.
export function buildOrder(series) {
  const pos = new Map();
  for (const x of series) for (const p of x.points) pos.set(p.seq, Math.max(pos.get(p.seq) || 0, p.build_position || 0));
  const seqs = [...pos.keys()].sort((a, b) => a - b);
  const key = new Map();
  let carry = 0;
  for (const q of seqs) {
    key.set(q, pos.get(q) || carry);
    carry = Math.max(carry, pos.get(q));
  }
  return seqs.sort((a, b) => key.get(a) - key.get(b) || a - b);
}

// buildLabels gives each build id its distinguishing part for the x axis:
// the ids without the prefix they all share, cut after a separator (so
// ci-4801…ci-4810 read 4801…4810 and demo-20261205T…-b1…-b8 read b1…b8),
// then at most 12 characters (the tail, after a …). The full id is in the
// tooltip.
export function buildLabels(ids) {
  let p = ids.length > 1 ? ids.reduce((a, b) => { let i = 0; while (i < a.length && a[i] === b[i]) i++; return a.slice(0, i); }) : '';
  p = p.slice(0, Math.max(...[...'-._/:'].map((c) => p.lastIndexOf(c))) + 1);
  return ids.map((id) => { const s = id.slice(p.length) || id; return s.length > 12 ? '…' + s.slice(-11) : s; });
}

function niceStep(span, count) {
  const raw = span / Math.max(1, count);
  const p = 10 ** Math.floor(Math.log10(raw));
  const f = raw / p;
  return (f <= 1 ? 1 : f <= 2 ? 2 : f <= 2.5 ? 2.5 : f <= 5 ? 5 : 10) * p;
}

// alpha turns '#rrggbb' into an rgba() string of opacity a.
function alpha(hex, a) {
  const n = parseInt(hex.slice(1), 16);
  return `rgba(${(n >> 16) & 255}, ${(n >> 8) & 255}, ${n & 255}, ${a})`;
}

// renderChart returns an element holding the chart; uPlot must be loaded
// (loadUPlot in plot.js). opts: series [{id, label, color, points: [{seq,
// value, stddev, n, build}]}], changes [{seq, direction, text, seriesIds:
// Set}], metric, zero (y from 0), width, height, lineage ('' or absent:
// the series may span lineages; a series' dash 1-3 draws its line dashed).
export function renderChart(opts) {
  const { series, changes = [], metric, zero = false } = opts;
  const W = Math.max(280, Math.round(opts.width || 960)), H = opts.height || 340;
  const wrap = h('div', { class: 'chart-wrap' });
  const el = h('div', {
    class: 'chart', role: 'img',
    'aria-label': metricLabel(metric) + ' by series over builds, ' + (opts.lineage ? 'lineage ' + opts.lineage : 'all lineages'),
  });
  wrap.append(el);

  const seqs = buildOrder(series);
  if (!seqs.length) {
    el.append(h('p', { class: 'muted-text chart-empty' }, 'no points in these series yet'));
    return wrap;
  }
  const slot = new Map(seqs.map((q, i) => [q, i]));
  const builds = new Map(), info = new Map();
  for (const x of series) {
    for (const p of x.points) {
      if (p.build && !builds.has(p.seq)) builds.set(p.seq, p.build);
      if ((p.git_sha || p.build_position) && !info.has(p.seq)) info.set(p.seq, p);
    }
  }
  const labelOf = (q) => builds.get(q) || '#' + q;
  // tick labels the builds in view by their distinguishing part
  // (buildLabels), or by position (#5) where that still repeats; the
  // ticks are spaced by the widest label, and the right padding fits the
  // last one.
  const inView = (u) => {
    const x0 = Math.max(0, Math.ceil(u.scales.x.min ?? 0)), x1 = Math.min(seqs.length - 1, Math.floor(u.scales.x.max ?? seqs.length - 1));
    const ids = seqs.slice(x0, x1 + 1).map(labelOf);
    let ls = buildLabels(ids);
    if (new Set(ls).size < ls.length) ls = ids.map((_, k) => '#' + ((info.get(seqs[x0 + k]) || {}).build_position || x0 + k + 1));
    return { x0, ls };
  };
  const textW = (u, s) => {
    const f = u.axes[0].font;
    meas.font = Array.isArray(f) ? f[0].replace(/[\d.]+px/, f[2] + 'px') : f || '12px system-ui, sans-serif';
    return meas.measureText(s).width;
  };

  // Columns aligned on the build slots; null where a series has no point.
  const xs = seqs.map((_, i) => i);
  const cols = series.map((sr) => {
    const v = new Array(seqs.length).fill(null), sd = new Array(seqs.length).fill(null);
    for (const p of sr.points) { v[slot.get(p.seq)] = p.value; sd[slot.get(p.seq)] = p.stddev > 0 ? p.stddev : null; }
    return { v, sd, pts: new Map(sr.points.map((p) => [p.seq, p])) };
  });

  // The y scale's unit comes from the whole series, so zooming keeps it.
  let amax = 0;
  for (const c of cols) c.v.forEach((v, i) => { if (v !== null) amax = Math.max(amax, Math.abs(v) + (c.sd[i] || 0)); });
  const sc = scaleFor(metric, amax);
  const yRange = (u) => {
    const x0 = Math.max(0, Math.floor(u.scales.x.min ?? 0)), x1 = Math.min(seqs.length - 1, Math.ceil(u.scales.x.max ?? seqs.length - 1));
    let lo = Infinity, hi = -Infinity;
    for (const c of cols) {
      for (let i = x0; i <= x1; i++) {
        if (c.v[i] === null) continue;
        const d = c.sd[i] || 0;
        lo = Math.min(lo, c.v[i] - d);
        hi = Math.max(hi, c.v[i] + d);
      }
    }
    if (lo === Infinity) return [0, 1];
    const dataLo = lo;
    if (zero) { lo = Math.min(0, lo); hi = Math.max(0, hi); }
    if (lo === hi) { const d = Math.abs(lo) * 0.05 || 1; lo -= d; hi += d; }
    const step = niceStep((hi - lo) / sc.div, 5) * sc.div;
    lo = Math.floor(lo / step) * step;
    hi = Math.ceil(hi / step) * step;
    if (zero && lo < 0 && dataLo >= 0) lo = 0;
    return [lo, hi];
  };

  const bySeq = new Map();
  for (const c of changes) {
    if (!slot.has(c.seq)) continue;
    if (!bySeq.has(c.seq)) bySeq.set(c.seq, []);
    bySeq.get(c.seq).push(c);
  }
  const ringed = [];
  for (const c of changes) for (const id of c.seriesIds || []) {
    const k = series.findIndex((sr) => sr.id === id);
    if (k >= 0 && slot.has(c.seq) && cols[k].v[slot.get(c.seq)] !== null) ringed.push([k, slot.get(c.seq)]);
  }

  const drawn = { bands: 0, rings: 0 };
  el.drawn = drawn;
  const many = seqs.length > 40;
  const css = getComputedStyle(document.documentElement);
  const color = (name, dflt) => css.getPropertyValue(name).trim() || dflt;

  // drawBands fills each series' ±stddev band under the lines (a bar for a
  // lone point), clipped to the plot area.
  const drawBands = (u) => {
    const ctx = u.ctx, { left, top, width, height } = u.bbox;
    drawn.bands = 0;
    ctx.save();
    ctx.beginPath();
    ctx.rect(left, top, width, height);
    ctx.clip();
    cols.forEach((c, k) => {
      if (!u.series[k + 1].show) return;
      const idx = [];
      c.sd.forEach((d, i) => { if (d !== null && c.v[i] !== null) idx.push(i); });
      if (!idx.length) return;
      const X = (i) => u.valToPos(i, 'x', true), Y = (v) => u.valToPos(v, 'y', true);
      ctx.fillStyle = alpha(series[k].color, 0.16);
      ctx.beginPath();
      if (idx.length === 1) {
        const i = idx[0], w = 6 * devicePixelRatio;
        ctx.rect(X(i) - w / 2, Y(c.v[i] + c.sd[i]), w, Y(c.v[i] - c.sd[i]) - Y(c.v[i] + c.sd[i]));
      } else {
        idx.forEach((i, j) => (j ? ctx.lineTo : ctx.moveTo).call(ctx, X(i), Y(c.v[i] + c.sd[i])));
        for (let j = idx.length - 1; j >= 0; j--) ctx.lineTo(X(idx[j]), Y(c.v[idx[j]] - c.sd[idx[j]]));
        ctx.closePath();
      }
      ctx.fill();
      drawn.bands++;
    });
    ctx.restore();
  };

  // drawRings circles the points where the detector confirmed a change.
  const drawRings = (u) => {
    const ctx = u.ctx;
    drawn.rings = 0;
    ctx.save();
    ctx.lineWidth = 1.5 * devicePixelRatio;
    ctx.strokeStyle = color('--fg', '#222');
    for (const [k, i] of ringed) {
      if (!u.series[k + 1].show || i < u.scales.x.min || i > u.scales.x.max) continue;
      ctx.beginPath();
      ctx.arc(u.valToPos(i, 'x', true), u.valToPos(cols[k].v[i], 'y', true), 4.5 * devicePixelRatio, 0, 2 * Math.PI);
      ctx.stroke();
      drawn.rings++;
    }
    ctx.restore();
  };

  // placeMarkers positions the change markers over the builds in view.
  const markers = [...bySeq].map(([q, cs]) => {
    const reg = cs.some((c) => c.direction === 'regression');
    const rels = cs.map((c) => c.rel).filter((r) => typeof r === 'number');
    const worst = rels.length ? rels.reduce((a, b) => (Math.abs(b) > Math.abs(a) ? b : a)) : null;
    const m = h('div', { class: 'change change-' + (reg ? 'regression' : 'improvement'), 'data-seq': q, title: cs.map((c) => c.text).join('\n') },
      h('span', { class: 'change-line' }), h('span', { class: 'change-label' }, (reg ? '▼ ' : '▲ ') + (worst === null ? 'change' : fmtPct(worst))));
    return [slot.get(q), m];
  });
  const placeMarkers = (u) => {
    for (const [i, m] of markers) {
      const inView = i >= u.scales.x.min && i <= u.scales.x.max;
      m.hidden = !inView;
      if (!inView) continue;
      const left = u.valToPos(i, 'x');
      m.style.left = left + 'px';
      m.classList.toggle('near-right', left > u.over.clientWidth - 40);
      m.classList.toggle('near-left', left < 40);
    }
  };

  const tip = h('div', { class: 'tooltip', hidden: true });
  wrap.append(tip);
  const showTip = (u) => {
    const i = u.cursor.idx;
    if (i === null || i === undefined || u.cursor.left < 0) { tip.hidden = true; return; }
    const q = seqs[i];
    const rows = [];
    series.forEach((sr, k) => {
      const p = cols[k].pts.get(q);
      if (!p || !u.series[k + 1].show) return;
      rows.push(h('div', { class: 'tip-row' }, h('span', { class: 'swatch', 'data-color': sr.color }), h('span', { class: 'tip-label' }, sr.label),
        h('span', { class: 'tip-val' }, fmtMeanSD(metric, p.value, p.stddev) + (p.n ? '  n=' + p.n : '') + (/^\d+$/.test(p.run || '') ? '  run #' + p.run : '') +
          (p.executable_sha256 ? '  exe ' + shortHash(p.executable_sha256) : '') +
          (p.bucket ? '  (' + p.bucket.builds + ' builds, ' + fmtValue(metric, p.bucket.min) + ' to ' + fmtValue(metric, p.bucket.max) + ')' : ''))));
    });
    const cs = bySeq.get(q) || [];
    const bk = series.map((_, k) => cols[k].pts.get(q)).find((p) => p && p.bucket);
    const bi = info.get(q);
    tip.replaceChildren(h('div', { class: 'tip-head' }, bk ? 'builds up to ' + labelOf(q) : 'build ' + labelOf(q),
      bi && bi.build_position ? h('span', { class: 'muted' }, '  #' + bi.build_position) : null,
      bi && bi.git_sha ? h('span', { class: 'tip-sha mono' }, '  git ' + shortSHA(bi.git_sha)) : null,
      h('span', { class: 'muted' }, bk ? '  seq ' + bk.bucket.seq_first + '–' + q : '  seq ' + q)), ...rows,
      ...cs.map((c) => h('div', { class: 'tip-change tip-' + c.direction }, c.text)));
    for (const sw of tip.querySelectorAll('.swatch')) sw.style.background = sw.dataset.color;
    tip.hidden = false;
    const left = u.over.offsetLeft + u.valToPos(i, 'x');
    const r = wrap.clientWidth || W;
    tip.style.left = (left > r * 0.6 ? left - tip.offsetWidth - 12 : left + 12) + 'px';
    tip.style.top = '36px';
  };

  const u = new window.uPlot({
    width: W, height: H,
    legend: { show: false },
    padding: [24, (u) => Math.max(40, textW(u, inView(u).ls.at(-1) || '') / 2 + 6), 0, 0],
    cursor: { drag: { x: true, y: false }, points: { size: 7 } },
    scales: { x: { time: false, range: (_, lo, hi) => (seqs.length === 1 ? [-0.5, 0.5] : [lo, hi]) }, y: { range: yRange } },
    axes: [
      {
        label: 'build, oldest → newest', incrs: [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000],
        space: (u) => Math.max(40, ...inView(u).ls.map((l) => textW(u, l) + 14)),
        values: (u, splits) => { const v = inView(u); return splits.map((i) => (Number.isInteger(i) ? v.ls[i - v.x0] ?? '' : '')); },
      },
      {
        label: metricLabel(metric, false) + (sc.unit ? ' (' + sc.unit + ')' : ''), size: 64,
        values: (_, splits, __, ___, incr) => splits.map((v) => fmtAxis(v / sc.div, incr / sc.div)),
      },
    ],
    series: [{ label: 'build' }, ...series.map((sr) => ({
      label: sr.label, stroke: sr.color, width: 2, spanGaps: true,
      dash: DASHES[sr.dash > 0 ? Math.min(3, sr.dash) : 0] || undefined,
      points: { show: true, size: many ? 3 : 5, fill: sr.color, stroke: sr.color },
    }))],
    hooks: {
      drawClear: [drawBands],
      draw: [drawRings, placeMarkers],
      setCursor: [showTip],
    },
  }, [xs, ...cols.map((c) => c.v)], el);
  el.plot = u;
  el.meta = series.map((sr) => ({ id: sr.id, lineage: sr.lineage || '', device: sr.device_model || '' }));
  el.slots = seqs.map(labelOf);
  for (const [, m] of markers) u.over.append(m);
  u.over.addEventListener('mouseleave', () => { tip.hidden = true; });
  return wrap;
}
