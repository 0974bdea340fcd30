// series.js: a metric by device model over builds, with the ±stddev band
// of each point's repetitions and the detector's change points marked.

import * as api from './api.js';
import { h, code, empty, errorBox } from './dom.js';
import { renderChart, PALETTE } from './chart.js';
import { loadUPlot } from './plot.js';
import { param, sortLineages, text } from './lineage.js';
import { fmtMeanSD, fmtPct, fmtValue, metricLabel, splitMetric, METRIC_ORDER, METRICS } from './format.js';

// label names a series by what distinguishes it from the others shown;
// the lineage whenever the chart is not restricted to one.
function labeler(all, oneLineage) {
  const differs = (k) => new Set(all.map((x) => String(x[k]))).size > 1;
  const os = differs('os_major'), emu = differs('emulated'), cfg = differs('config'), lin = !oneLineage || differs('lineage');
  return (x) => {
    let l = x.device_model || '(unknown device)';
    if (os && x.os_major) l += ' · OS ' + x.os_major;
    if (emu || x.emulated) l += x.emulated ? ' · emulated' : ' · real';
    if (cfg) l += ' · ' + (x.config || 'default');
    if (lin) l += ' · ' + (x.lineage || 'no lineage');
    return l;
  };
}

// changesFor fetches the alerts of the shown series within their seq range.
async function changesFor(p, series) {
  const ids = new Set(series.map((x) => x.id));
  const seqs = series.flatMap((x) => x.points.map((pt) => pt.seq));
  if (!seqs.length) return [];
  const lo = Math.min(...seqs), hi = Math.max(...seqs);
  const page = await api.listAlerts({ suite: p.suite, metric: p.metric, lineage: p.lineage, limit: 100 });
  const groups = (page.items || []).filter((g) => g.seq >= lo - 5 && g.seq <= hi + 5 && (!p.lineage || g.lineage === p.lineage)).slice(0, 15);
  const out = [];
  await Promise.all(groups.map(async (g) => {
    let d;
    try { d = await api.getAlert(g.id); } catch { return; }
    for (const a of d.alerts || []) {
      if (!ids.has(a.series.id)) continue;
      out.push({
        seq: a.seq, direction: a.direction, rel: a.relative_change, groupId: g.id, seriesIds: new Set([a.series.id]), status: g.status,
        text: `#${g.id} ${a.direction} ${fmtPct(a.relative_change)} on ${a.series.device_model || '?'}: ` +
          `${fmtValue(a.series.metric, a.before_mean)} → ${fmtValue(a.series.metric, a.after_mean)} (${g.status})`,
      });
    }
  }));
  return out;
}

// seriesChart loads the series of p (suite, metric, config, lineage, last)
// and returns the chart, its legend and the table of latest values.
export async function seriesChart(p, ctx, { zero = false } = {}) {
  const box = h('div', { class: 'series-block' });
  let data, changes = [];
  // Long histories are downsampled on the server to about one point per
  // 6 px of chart, in buckets of builds shared by every series.
  const points = p.last > 200 ? Math.max(100, Math.min(300, Math.floor((window.innerWidth || 1200) / 6))) : 0;
  try {
    data = await api.querySeries(points ? { ...p, points } : p);
  } catch (e) {
    box.append(errorBox(e, 'the series'));
    return box;
  }
  const raw = data.series || [];
  if (!raw.length) {
    box.append(empty('No series match.', 'No results of ' + metricLabel(p.metric) + ' in suite ' + p.suite + (p.config ? ', config ' + p.config : '') + ' on ' + text(p.lineage) + ' yet.'));
    return box;
  }
  try { changes = await changesFor(p, raw); } catch { /* the chart without markers is still right */ }
  // A change inside a bucket is marked at the bucket's point.
  const buckets = [...new Map(raw.flatMap((x) => x.points).filter((pt) => pt.bucket).map((pt) => [pt.seq, pt.bucket.seq_first]))];
  for (const c of changes) {
    const b = buckets.find(([last, first]) => c.seq >= first && c.seq <= last);
    if (b) c.seq = b[0];
  }
  try {
    await loadUPlot();
  } catch (e) {
    box.append(errorBox(e, 'the chart library'));
    return box;
  }
  const label = labeler(raw, !!p.lineage);
  // Each lineage's series are their own lines (the API keys series by
  // lineage); across lineages they also differ in dash pattern.
  const lins = sortLineages([...new Set(raw.map((x) => x.lineage))]);
  const series = raw.map((x, i) => ({ ...x, label: label(x), color: PALETTE[i % PALETTE.length], dash: Math.min(3, lins.indexOf(x.lineage)) }));
  const hidden = new Set();
  const holder = h('div', { class: 'chart-holder' });
  const draw = () => {
    const width = holder.clientWidth || 960;
    holder.replaceChildren(renderChart({
      series: series.filter((x) => !hidden.has(x.id)),
      changes: changes.filter((c) => [...c.seriesIds].some((id) => !hidden.has(id))),
      metric: p.metric, zero, width, lineage: p.lineage,
    }));
  };
  const legend = h('div', { class: 'legend' }, series.map((x) => {
    const item = h('button', { type: 'button', class: 'legend-item', 'data-series-id': x.id, 'data-lineage': x.lineage, 'aria-pressed': 'true', title: 'show or hide this series' },
      h('span', { class: 'swatch', 'data-color': x.color }), x.label);
    item.addEventListener('click', () => {
      if (hidden.has(x.id)) hidden.delete(x.id); else hidden.add(x.id);
      item.setAttribute('aria-pressed', String(!hidden.has(x.id)));
      item.classList.toggle('off', hidden.has(x.id));
      draw();
    });
    return item;
  }));
  for (const sw of legend.querySelectorAll('.swatch')) sw.style.background = sw.dataset.color;

  const changeOf = (x) => changes.filter((c) => c.seriesIds.has(x.id)).sort((a, b) => b.seq - a.seq)[0];
  const table = h('table', { class: 'data series-table' },
    h('thead', {}, h('tr', {}, h('th', {}, 'Series'), h('th', { class: 'r' }, 'Points'), h('th', {}, 'Latest build'),
      h('th', { class: 'r' }, 'Latest (mean ± stddev)'), h('th', { class: 'r', title: 'repetitions behind the latest point' }, 'Reps'), h('th', { class: 'r' }, 'Previous'),
      h('th', { class: 'r' }, 'Δ vs previous'), h('th', {}, 'Change point'))),
    h('tbody', {}, series.map((x) => {
      const pts = x.points, last = pts[pts.length - 1], prev = pts[pts.length - 2];
      const rel = last && prev && prev.value ? (last.value - prev.value) / Math.abs(prev.value) : NaN;
      const c = changeOf(x);
      return h('tr', { 'data-series-id': x.id, 'data-device': x.device_model, 'data-lineage': x.lineage },
        h('td', {}, h('span', { class: 'swatch', 'data-color': x.color }), x.label),
        h('td', { class: 'r num' }, pts.length),
        h('td', { class: 'mono' }, !last ? '—' : /^\d+$/.test(last.run || '')
          ? h('a', { href: '/runs/' + last.run, title: 'the run behind this point' }, last.build || '#' + last.seq) : last.build || '#' + last.seq),
        h('td', { class: 'r num latest' }, last ? fmtMeanSD(p.metric, last.value, last.stddev) : '—'),
        h('td', { class: 'r num', title: 'repetitions behind the latest point' }, last && last.n ? 'n=' + last.n : '—'),
        h('td', { class: 'r num' }, prev ? fmtMeanSD(p.metric, prev.value, prev.stddev) : '—'),
        h('td', { class: 'r num delta' }, fmtPct(rel)),
        h('td', {}, c ? h('a', { href: '/alerts/' + c.groupId, class: c.direction === 'regression' ? 'bad' : 'good' },
          (c.direction === 'regression' ? '▼ ' : '▲ ') + fmtPct(c.rel) + ' at ' + ((pts.find((pt) => pt.seq === c.seq) || {}).build || 'seq ' + c.seq))
          : h('span', { class: 'muted' }, 'none')));
    })));
  for (const sw of table.querySelectorAll('.swatch')) sw.style.background = sw.dataset.color;
  box.append(holder, legend, h('p', { class: 'chart-note muted' },
    'Each point is one build’s mean over its repetitions; the shaded band is ± one standard deviation. Dashed lines mark change points the detector confirmed. Hover for values; drag across builds to zoom in, double-click to zoom out.'),
  table);
  draw();
  // The holder has its width once attached: callers call box.layout() then.
  let last = 0;
  box.layout = () => { last = holder.clientWidth; draw(); };
  if (window.ResizeObserver) {
    let timer = 0;
    const ro = new ResizeObserver(() => {
      const w = holder.clientWidth;
      if (!w || Math.abs(w - last) < 8) return;
      last = w;
      clearTimeout(timer);
      timer = setTimeout(draw, 60);
    });
    ro.observe(holder);
    ctx.onLeave(() => ro.disconnect());
  }
  return box;
}

function metricSort(a, b) {
  const sa = splitMetric(a), sb = splitMetric(b);
  const ia = METRIC_ORDER.indexOf(sa.base), ib = METRIC_ORDER.indexOf(sb.base);
  return (ia < 0 ? 99 : ia) - (ib < 0 ? 99 : ib) || sa.base.localeCompare(sb.base) || sa.layer - sb.layer;
}

// render is the Series view.
export async function render(root, q, ctx) {
  ctx.title('Series');
  const lin = ctx.lineage || '';
  root.replaceChildren(h('div', { class: 'view-head' }, h('h2', {}, 'Series'),
    h('p', { class: 'lede' }, 'One metric by device model over builds.')), h('p', { class: 'muted' }, 'loading…'));
  let catalog;
  try {
    catalog = (await api.seriesCatalog({ limit: 5000 })).items || [];
  } catch (e) {
    root.replaceChildren(errorBox(e, 'the series catalog'));
    return;
  }
  if (!catalog.length) {
    root.replaceChildren(h('div', { class: 'view-head' }, h('h2', {}, 'Series')),
      empty('No series yet.', 'A series is recorded for every metric of every finished run (per suite, config, device model, OS and build lineage).',
        h('p', {}, 'No runs have finished yet: trigger one with ', code('lesfarm run --suite smoke --build $BUILD --wait'), '.')));
    return;
  }
  const mine = catalog.filter((k) => !lin || k.lineage === lin);
  if (!mine.length) {
    root.replaceChildren(h('div', { class: 'view-head' }, h('h2', {}, 'Series')),
      empty('No series on lineage ' + lin + ' yet.', h('p', {}, 'Series appear as runs of this lineage finish, e.g. ',
        code('lesfarm run --lineage ' + lin + ' --suite smoke --build $BUILD --wait'), ', or ', h('a', { href: '/series?lineage=*' }, 'show every lineage'), '.')));
    return;
  }
  const uniq = (xs) => [...new Set(xs)];
  const suites = uniq(mine.map((k) => k.suite)).sort();
  const suite = suites.includes(q.get('suite')) ? q.get('suite') : suites[0];
  const inSuite = mine.filter((k) => k.suite === suite);
  const metrics = uniq(inSuite.map((k) => k.metric)).sort(metricSort);
  const metric = metrics.includes(q.get('metric')) ? q.get('metric') : metrics.includes('decode_tps') ? 'decode_tps' : metrics[0];
  const inMetric = inSuite.filter((k) => k.metric === metric);
  const configs = uniq(inMetric.map((k) => k.config)).sort();
  const config = q.has('config') && (q.get('config') === '' || configs.includes(q.get('config'))) ? q.get('config') : configs[0] ?? '';
  const last = [20, 50, 100, 200, 500, 1000].includes(Number(q.get('last'))) ? Number(q.get('last')) : 50;
  const zero = q.get('zero') === '1';

  const opt = (v, t, cur) => h('option', { value: v, selected: v === cur }, t);
  const known = metrics.filter((m) => METRICS[splitMetric(m).base] && splitMetric(m).layer < 0);
  const others = metrics.filter((m) => !known.includes(m));
  const form = h('form', { class: 'filters', onsubmit: (ev) => ev.preventDefault() },
    h('label', {}, 'suite', h('select', { name: 'suite' }, suites.map((x) => opt(x, x, suite)))),
    h('label', {}, 'metric', h('select', { name: 'metric' }, known.map((m) => opt(m, metricLabel(m), metric)),
      others.length ? h('optgroup', { label: 'per layer and other' }, others.map((m) => opt(m, metricLabel(m), metric))) : null)),
    h('label', {}, 'config', h('select', { name: 'config' }, configs.length > 1 ? opt('', 'all configs', config) : null,
      configs.map((c) => opt(c, c || '(default)', config)))),
    h('label', {}, 'builds', h('select', { name: 'last' }, [20, 50, 100, 200, 500, 1000].map((n) => opt(String(n), 'last ' + n, String(last))))),
    h('label', { class: 'check' }, h('input', { type: 'checkbox', name: 'zero', checked: zero }), 'y axis from 0'));
  const apply = (changed) => {
    const p = new URLSearchParams();
    p.set('suite', form.suite.value);
    if (changed !== 'suite') p.set('metric', form.metric.value);
    if (changed !== 'suite' && changed !== 'metric') p.set('config', form.config.value);
    p.set('lineage', param(lin));
    if (form.last.value !== '50') p.set('last', form.last.value);
    if (form.zero.checked) p.set('zero', '1');
    ctx.navigate('/series?' + p, { replace: true });
  };
  for (const el of form.querySelectorAll('select, input')) el.addEventListener('change', () => apply(el.name));
  ctx.replaceQuery({ suite, metric, config, lineage: param(lin), last: last === 50 ? null : last, zero: zero ? 1 : null });
  const block = h('div', {}, h('p', { class: 'muted' }, 'loading…'));
  root.replaceChildren(h('div', { class: 'view-head' }, h('h2', {}, 'Series'),
    h('p', { class: 'lede' }, metricLabel(metric) + ' in suite ' + suite + ', by device model over builds.')), form,
  h('section', { class: 'card chart-card' }, h('h3', { class: 'chart-title' }, metricLabel(metric) + ' · ' + (config || 'all configs') + ' · ' + text(lin)), block));
  const chart = await seriesChart({ suite, metric, config, lineage: lin, last }, ctx, { zero });
  block.replaceChildren(chart);
  if (chart.layout) chart.layout();
}
