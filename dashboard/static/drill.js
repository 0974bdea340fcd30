// drill.js: inside one run — the LES ladder of its configs, and for one
// config its per-token decode timeline (with stall per token), its
// per-layer hit rate and predictor precision and recall, and where the
// decode time went, and its layer × expert load heatmap; and the device's
// thermal and battery trace. The config and the heatmap's metric are kept
// in the URL (?config=N&heat=demand|miss|hit).

import * as api from './api.js';
import { h, empty, errorBox } from './dom.js';
import { fmtMeanSD, fmtNum, fmtBytes } from './format.js';
import { linePlot } from './plot.js';
import { heatmap } from './heatmap.js';

// mode is a config key's mode, e.g. "scheduled" of "scheduled/budget=20%".
const mode = (r) => String(r.config_key || '#' + r.config_index).split('/')[0];
const rest = (r) => String(r.config_key || '').split('/').slice(1).join('/');

// ladderTable lists the run's configs in order with decode throughput,
// the speedup over the first config and over the row before (the ladder's
// reading); null when the run has fewer than two configs.
export function ladderTable(results) {
  const ok = results.filter((r) => r.decode_tps && r.decode_tps.mean > 0);
  if (ok.length < 2) return null;
  const base = ok[0].decode_tps.mean;
  const x = (v) => '×' + v.toFixed(2);
  return h('table', { class: 'data ladder-table' },
    h('thead', {}, h('tr', {}, h('th', {}, 'Rung'), h('th', {}, 'Config'), h('th', { class: 'r' }, 'Decode'), h('th', { class: 'r' }, '× ' + mode(ok[0])),
      h('th', { class: 'r' }, '× row before'), h('th', { class: 'r' }, 'Hit rate'), h('th', { class: 'r' }, 'Stall'))),
    h('tbody', {}, ok.map((r, i) => h('tr', { 'data-config': r.config_key },
      h('td', { class: 'mode' }, mode(r)),
      h('td', { class: 'mono small' }, rest(r) || '—'),
      h('td', { class: 'r num' }, fmtMeanSD('decode_tps', r.decode_tps.mean, r.decode_tps.stddev)),
      h('td', { class: 'r num vs-base' }, x(r.decode_tps.mean / base)),
      h('td', { class: 'r num vs-prev' }, i ? x(r.decode_tps.mean / ok[i - 1].decode_tps.mean) : '—'),
      h('td', { class: 'r num' }, fmtNum(r.hit_rate, 3)),
      h('td', { class: 'r num' }, fmtNum(r.stall_fraction, 3))))));
}

// renderInside returns the "inside the run" section for a finished run.
export function renderInside(run, q, ctx) {
  const results = run.results || [];
  const box = h('section', { class: 'card inside', id: 'inside' }, h('h3', {}, 'Inside the run'));
  if (!results.length) return null;
  const ladder = ladderTable(results);
  if (ladder) box.append(h('h4', {}, 'LES ladder of this run'), h('div', { class: 'table-scroll' }, ladder));
  let cfg = Number(q.get('config'));
  if (!results.some((r) => r.config_index === cfg)) cfg = results[0].config_index;
  const pick = h('select', { id: 'config-select', 'aria-label': 'config' }, results.map((r) => h('option', { value: r.config_index }, r.config_key || '#' + r.config_index)));
  pick.value = String(cfg);
  const body = h('div', { class: 'inside-body' });
  const trace = h('div', { class: 'device-trace' });
  box.append(trace, h('label', { class: 'config-pick' }, 'config ', pick), body);
  let metric = ['demand', 'miss', 'hit'].includes(q.get('heat')) ? q.get('heat') : 'demand';
  const show = async () => {
    ctx.replaceQuery({ config: cfg, heat: metric });
    body.replaceChildren(h('p', { class: 'muted' }, 'loading…'));
    let tl, ly, hm;
    try {
      [tl, ly, hm] = await Promise.all([api.runTimeline(run.id, cfg, { points: 600 }), api.runLayers(run.id, cfg), api.runExperts(run.id, cfg, { metric })]);
    } catch (e) {
      body.replaceChildren(errorBox(e, 'the run\'s telemetry'));
      return;
    }
    const parts = [];
    const width = Math.min(1200, (box.clientWidth || 960) - 32);
    if (!tl.points.length) {
      parts.push(empty('No per-token samples for this config.', h('p', {}, 'The agent streams them while it runs; a run from before telemetry, or one that failed early, has none.')));
    } else {
      const xs = tl.points.map((p) => p.index);
      const down = tl.points.length < tl.steps_total ? ' (' + tl.steps_total + ' steps in ' + tl.points.length + ' buckets)' : '';
      parts.push(h('div', { class: 'plot timeline-plot' }, await linePlot({
        title: 'Decode time per token' + down, xLabel: 'decode step', yLabel: 'ms per token', width,
        xs, series: [
          { label: 'total', values: tl.points.map((p) => p.ms_per_token), fmt: (v) => v.toFixed(2) + ' ms' },
          { label: 'stall', values: tl.points.map((p) => p.stall_ms_per_token), fmt: (v) => v.toFixed(2) + ' ms' },
        ],
      })));
      let dur = 0, stall = 0, tok = 0, bytes = 0;
      for (const p of tl.points) { dur += p.ms_per_token * p.tokens; stall += p.stall_ms_per_token * p.tokens; tok += p.tokens; bytes += p.bytes_per_token * p.tokens; }
      const share = dur > 0 ? stall / dur : 0;
      parts.push(h('div', { class: 'stall-breakdown' }, h('h4', {}, 'Where decode time went'),
        h('div', { class: 'stall-bar', role: 'img', 'aria-label': 'compute ' + ((1 - share) * 100).toFixed(1) + '%, waiting for expert reads ' + (share * 100).toFixed(1) + '%' },
          h('span', { class: 'compute', 'data-share': (1 - share).toFixed(4) }), h('span', { class: 'stall', 'data-share': share.toFixed(4) })),
        h('p', { class: 'small' }, h('span', { class: 'stall-share' }, (share * 100).toFixed(1) + '%'), ' of ' + (dur / 1000).toFixed(2) + ' s of decode over ' + tok + ' tokens waited for expert reads; ',
          fmtBytes(bytes / Math.max(1, tok)) + ' of experts read per token.')));
    }
    if (ly.layers.length) {
      parts.push(h('div', { class: 'plot layer-plot' }, await linePlot({
        title: 'Per layer over ' + ly.steps + ' decode steps', xLabel: 'layer', yLabel: 'rate', width, range: [0, 1], points: true, xInt: true,
        xs: ly.layers.map((l) => l.layer), series: [
          { label: 'hit rate', values: ly.layers.map((l) => l.hit_rate), fmt: (v) => v.toFixed(3) },
          { label: 'prefetch precision', values: ly.layers.map((l) => l.prefetch_precision), fmt: (v) => v.toFixed(3) },
          { label: 'prefetch recall', values: ly.layers.map((l) => l.prefetch_recall), fmt: (v) => v.toFixed(3) },
        ],
      })));
      parts.push(h('details', {}, h('summary', {}, 'Per-layer table'), h('div', { class: 'table-scroll' }, h('table', { class: 'data layers-table' },
        h('thead', {}, h('tr', {}, ...['Layer', 'Hits', 'Misses', 'Prefetch used', 'Prefetch wasted', 'Hit rate', 'Precision', 'Recall'].map((t, i) => h('th', { class: i ? 'r' : '' }, t)))),
        h('tbody', {}, ly.layers.map((l) => h('tr', { 'data-layer': l.layer }, h('td', {}, l.layer), h('td', { class: 'r num' }, l.hits), h('td', { class: 'r num' }, l.misses),
          h('td', { class: 'r num' }, l.prefetch_used), h('td', { class: 'r num' }, l.prefetch_wasted), h('td', { class: 'r num' }, l.hit_rate.toFixed(3)),
          h('td', { class: 'r num' }, l.prefetch_precision.toFixed(3)), h('td', { class: 'r num' }, l.prefetch_recall.toFixed(3)))))))));
    }
    parts.push(heatSection(run.id, cfg, hm, width, (m) => { metric = m; ctx.replaceQuery({ config: cfg, heat: m }); }));
    parts.push(h('p', { class: 'muted small' }, 'Drag across a chart to zoom, double-click to zoom out. Raw JSON: ',
      h('a', { href: '/v1/runs/' + run.id + '/configs/' + cfg + '/timeline', target: '_blank', rel: 'noopener' }, 'timeline'), ' · ',
      h('a', { href: '/v1/runs/' + run.id + '/configs/' + cfg + '/layers', target: '_blank', rel: 'noopener' }, 'layers'), ' · ',
      h('a', { href: '/v1/runs/' + run.id + '/configs/' + cfg + '/experts', target: '_blank', rel: 'noopener' }, 'experts'), ' · ',
      h('a', { href: '/v1/runs/' + run.id + '/device-trace', target: '_blank', rel: 'noopener' }, 'device trace'),
      '. Precision: of what the predictor fetched, the share used; recall: of the demanded experts not already cached, the share it fetched in time.'));
    body.replaceChildren(...parts);
    for (const el of body.querySelectorAll('.stall-bar span')) el.style.width = (Number(el.dataset.share) * 100) + '%';
  };
  pick.addEventListener('change', () => { cfg = Number(pick.value); show(); });
  box.ready = Promise.all([show(), deviceTrace(run, trace, box)]);
  return box;
}

// heatSection is the layer × expert heatmap of one config with its metric
// switch; switching refetches the matrix and redraws in place.
function heatSection(runID, cfg, hm, width, onMetric) {
  const sel = h('select', { id: 'heat-metric', 'aria-label': 'heatmap metric' },
    h('option', { value: 'demand' }, 'demand'), h('option', { value: 'miss' }, 'miss'), h('option', { value: 'hit' }, 'hit'));
  sel.value = hm.metric;
  const holder = h('div', { class: 'heat-holder' });
  const draw = (m) => holder.replaceChildren(m.cells.length ? heatmap(m, width)
    : empty('No per-expert counts for this config.', 'Agents send them every 1024 measured decode steps and at the end of each config; a run from an older agent has none.'));
  draw(hm);
  sel.addEventListener('change', async () => {
    onMetric(sel.value);
    try {
      draw(await api.runExperts(runID, cfg, { metric: sel.value }));
    } catch (e) {
      holder.replaceChildren(errorBox(e, 'the expert load'));
    }
    holder.dataset.metric = sel.value;
  });
  holder.dataset.metric = hm.metric;
  return h('div', { class: 'heat-section' }, h('h4', {}, 'Expert load: layer × expert over ' + (hm.steps || 0) + ' decode steps'),
    h('label', { class: 'config-pick' }, 'colour ', sel), holder);
}

// deviceTrace draws the run's thermal and battery trace into el, or says
// the device reported none.
async function deviceTrace(run, el, box) {
  let dt;
  try {
    dt = await api.runDeviceTrace(run.id, { points: 600 });
  } catch (e) {
    el.replaceChildren(errorBox(e, 'the device trace'));
    return;
  }
  const title = h('h4', {}, 'Thermal and battery');
  if (!dt.reported) {
    el.replaceChildren(title, h('p', { class: 'muted small trace-none' }, 'Not reported: the device sent no thermal or battery reading while it ran this (emulated devices report none).'));
    return;
  }
  const t0 = Date.parse(dt.points[0].at);
  const val = (k) => dt.points.map((p) => (p[k] === undefined ? null : p[k]));
  const series = [
    { label: 'hottest zone °C', values: val('max_temp_c'), fmt: (v) => v.toFixed(1) + ' °C' },
    { label: 'battery %', values: val('battery_percent'), fmt: (v) => v.toFixed(0) + ' %' },
    { label: 'battery °C', values: val('battery_temp_c'), fmt: (v) => v.toFixed(1) + ' °C' },
  ].filter((s) => s.values.some((v) => v !== null));
  const status = dt.points.map((p) => p.thermal_status).filter(Boolean);
  const parts = [title];
  if (series.length) {
    parts.push(h('div', { class: 'plot trace-plot' }, await linePlot({
      title: 'Device state over ' + dt.samples_total + ' heartbeats', xLabel: 'seconds since the first heartbeat', yLabel: '°C · %',
      width: Math.min(1200, (box.clientWidth || 960) - 32), xs: dt.points.map((p) => (Date.parse(p.at) - t0) / 1000), series,
    })));
  }
  if (status.length) parts.push(h('p', { class: 'small' }, 'Thermal status: ', h('span', { class: 'trace-status' }, status[status.length - 1]), ' at the end.'));
  el.replaceChildren(...parts);
}
