// plot.js: charts drawn by uPlot 1.6.32 (MIT, vendored in ./vendor, see
// VENDOR.md), loaded once on first use. Drag across a chart to zoom into
// that range; double-click to zoom back out.

import { h } from './dom.js';

// PALETTE: Okabe–Ito (colour-blind safe), then a few darker extras.
export const PALETTE = ['#0072b2', '#e69f00', '#009e73', '#cc79a7', '#56b4e9', '#d55e00', '#6a3d9a', '#4d4d4d', '#b15928', '#1b9e77'];

let loading = null;

// loadUPlot resolves to the uPlot constructor, adding its script and
// stylesheet to the page the first time.
export function loadUPlot() {
  if (window.uPlot) return Promise.resolve(window.uPlot);
  if (!loading) {
    loading = new Promise((resolve, reject) => {
      document.head.append(h('link', { rel: 'stylesheet', href: '/ui/vendor/uPlot.min.css' }));
      const sc = h('script', { src: '/ui/vendor/uPlot.iife.min.js' });
      sc.addEventListener('load', () => resolve(window.uPlot));
      sc.addEventListener('error', () => { loading = null; reject(new Error('could not load the chart library')); });
      document.head.append(sc);
    });
  }
  return loading;
}

// linePlot draws xs against each of series [{label, values, fmt, scale}]
// into a new element and returns it; opts: title, xLabel, yLabel,
// width, height, points (draw points only, no lines), xInt (integer x
// ticks), range ([min, max] for y).
export async function linePlot(opts) {
  const uPlot = await loadUPlot();
  const el = h('div', { class: 'uplot-holder', 'data-title': opts.title || '' });
  const width = Math.max(320, Math.round(opts.width || 900));
  const u = new uPlot({
    width, height: opts.height || 260,
    title: opts.title,
    scales: { x: { time: false }, y: opts.range ? { range: opts.range } : {} },
    axes: [{ label: opts.xLabel, ...(opts.xInt ? { incrs: [1, 2, 5, 10, 20, 50, 100] } : {}) }, { label: opts.yLabel, size: 64 }],
    cursor: { drag: { x: true, y: false } },
    series: [{ label: opts.xLabel }, ...opts.series.map((s, i) => ({
      label: s.label, stroke: s.color || PALETTE[i % PALETTE.length], width: 1.5,
      points: { show: !!opts.points, size: 7 }, paths: opts.points ? () => null : undefined,
      value: (_, v) => (v === null || v === undefined ? '—' : s.fmt ? s.fmt(v) : String(v)),
    }))],
  }, [opts.xs, ...opts.series.map((s) => s.values)], el);
  el.plot = u;
  el.fit = (w) => u.setSize({ width: Math.max(320, Math.round(w)), height: opts.height || 260 });
  return el;
}
