// heatmap.js: the layer × expert load of one run config on a canvas —
// rows are layers, columns experts, colour the demand, miss or hit count
// (viridis, colour-blind safe, on a square-root scale so the cold experts
// stay visible beside the hot ones). Hover (or a tap) shows a cell's value. The drawn
// state (shape, per-row hottest expert) is kept on the canvas element
// (canvas.heat) and in data-hot, for tests and tools.

import { h } from './dom.js';

// VIRIDIS samples matplotlib's viridis at 9 evenly spaced points.
const VIRIDIS = [[68, 1, 84], [71, 44, 122], [59, 81, 139], [44, 113, 142], [33, 144, 141], [39, 173, 129], [92, 200, 99], [170, 220, 50], [253, 231, 37]];
const ZERO = [238, 238, 238];

// colour maps t in [0, 1] onto viridis.
export function colour(t) {
  const x = Math.min(1, Math.max(0, t)) * (VIRIDIS.length - 1);
  const i = Math.min(VIRIDIS.length - 2, Math.floor(x));
  const f = x - i;
  return VIRIDIS[i].map((v, k) => Math.round(v + f * (VIRIDIS[i + 1][k] - v)));
}

const NOUN = { demand: 'demands', miss: 'misses', hit: 'hits' };

// Margins of the canvas for the axis labels, in px.
const ML = 34, MT = 16;

// tickStep is the smallest power of two whose ticks are at least gap px
// apart at size px per cell.
const tickStep = (size, gap) => { let k = 1; while (k * size < gap) k *= 2; return k; };

// range says which layers or experts cell index i of bin covers.
const range = (i, bin, n) => (bin > 1 ? i * bin + '–' + Math.min(n, (i + 1) * bin) - 1 : String(i));

// heatmap draws hm (the API's ExpertHeatmap) into a new element at most
// width pixels wide (the canvas scrolls sideways when the cells would get
// narrower than 2 px).
export function heatmap(hm, width) {
  const rows = hm.cells.length, cols = rows ? hm.cells[0].length : 0;
  const cw = Math.max(2, Math.floor((width - 40 - ML) / Math.max(1, cols)));
  const ch = Math.max(4, Math.min(14, Math.floor(480 / Math.max(1, rows))));
  const W = cols * cw, H = rows * ch;
  const canvas = h('canvas', { class: 'heatmap-canvas', width: ML + W, height: MT + H, role: 'img',
    'aria-label': 'layer × expert ' + hm.metric + ' counts, ' + rows + ' rows by ' + cols + ' columns' });
  const g = canvas.getContext('2d');
  const img = g.createImageData(W, H);
  const scale = Math.sqrt(Math.max(1, hm.max));
  const hot = [];
  for (let r = 0; r < rows; r++) {
    let best = 0;
    for (let c = 0; c < cols; c++) {
      const v = hm.cells[r][c];
      if (v > hm.cells[r][best]) best = c;
      const rgb = v > 0 ? colour(Math.sqrt(v) / scale) : ZERO;
      for (let y = r * ch; y < (r + 1) * ch; y++) {
        for (let x = c * cw; x < (c + 1) * cw; x++) {
          const o = (y * W + x) * 4;
          img.data[o] = rgb[0]; img.data[o + 1] = rgb[1]; img.data[o + 2] = rgb[2]; img.data[o + 3] = 255;
        }
      }
    }
    hot.push({ row: r, col: best, value: hm.cells[r][best] || 0 });
  }
  g.putImageData(img, ML, MT);
  // Axis labels: first layer (expert) of every k-th row (column).
  g.fillStyle = '#555';
  g.font = '10px sans-serif';
  g.textAlign = 'right';
  g.textBaseline = 'middle';
  const kr = tickStep(ch, 12), kc = tickStep(cw, 30);
  for (let r = 0; r < rows; r += kr) g.fillText(String(r * hm.layer_bin), ML - 4, MT + (r + 0.5) * ch);
  g.textAlign = 'left';
  g.textBaseline = 'alphabetic';
  for (let c = 0; c < cols; c += kc) g.fillText(String(c * hm.expert_bin), ML + c * cw, MT - 4);
  canvas.heat = { rows, cols, left: ML, top: MT, cellWidth: cw, cellHeight: ch, max: hm.max, metric: hm.metric, hot };
  canvas.dataset.hot = hot.map((c) => c.row * hm.layer_bin + ':' + c.col * hm.expert_bin).join(' ');
  const tip = h('div', { class: 'heatmap-tip', role: 'status', 'aria-live': 'polite' }, 'Hover a cell for its count.');
  const show = (ev) => {
    const box = canvas.getBoundingClientRect();
    const c = Math.floor((ev.clientX - box.left - ML) / cw), r = Math.floor((ev.clientY - box.top - MT) / ch);
    if (r < 0 || r >= rows || c < 0 || c >= cols) return;
    tip.textContent = 'layer ' + range(r, hm.layer_bin, hm.layers) + ', expert ' + range(c, hm.expert_bin, hm.experts) + ': ' +
      hm.cells[r][c] + ' ' + NOUN[hm.metric] + (hm.steps ? ' over ' + hm.steps + ' decode steps' : '');
    tip.dataset.row = r; tip.dataset.col = c; tip.dataset.value = hm.cells[r][c];
  };
  canvas.addEventListener('mousemove', show);
  canvas.addEventListener('click', show); // a tap, on a phone
  // Legend: the scale from 0 to the largest cell, square-root spaced.
  const legend = h('canvas', { class: 'heatmap-legend', width: 200, height: 10, 'aria-hidden': 'true' });
  const lg = legend.getContext('2d');
  for (let x = 0; x < 200; x++) {
    const [R, G, B] = colour(x / 199);
    lg.fillStyle = 'rgb(' + R + ',' + G + ',' + B + ')';
    lg.fillRect(x, 0, 1, 10);
  }
  const bins = (hm.layer_bin > 1 || hm.expert_bin > 1) ? ' Each cell sums ' + hm.layer_bin + ' layer(s) × ' + hm.expert_bin + ' expert(s).' : '';
  return h('div', { class: 'heatmap' },
    h('div', { class: 'heatmap-scroll table-scroll' }, h('div', { class: 'heatmap-axes' }, h('span', { class: 'axis-y small muted' }, 'layer ↓'), canvas)),
    h('p', { class: 'small heatmap-key' }, h('span', { class: 'muted' }, 'expert →  '), '0 ', legend, ' ' + hm.max + ' ' + NOUN[hm.metric] +
      ' (√ scale; grey: none).' + bins),
    tip);
}
