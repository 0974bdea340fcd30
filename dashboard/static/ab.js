// ab.js: /ab/{id}, one A/B comparison of two builds (docs/ab.md): the
// verdict, and per device, config and metric the test's answer with its
// p-values, the change with its interval, the means and the samples per
// side; the rounds it took and its runs. Also the build page's list of
// comparisons (abList).

import * as api from './api.js';
import { h, code, empty, errorBox, badge } from './dom.js';
import { fmtPct, fmtP, fmtValue, metricLabel, fmtTime, humanize } from './format.js';

const enc = encodeURIComponent;
const KIND = { regression: 'bad', improvement: 'good', same: 'scope', unknown: 'warn', failed: 'bad' };

function buildLink(id) {
  return h('a', { class: 'mono', href: '/builds/' + enc(id) }, id);
}

function verdictBadge(v) {
  return badge(humanize(v || 'running'), KIND[v] || 'scope');
}

// decisionsTable renders one row per device, config and metric.
function decisionsTable(a) {
  const ds = a.decisions || [];
  if (!ds.length) return h('p', { class: 'muted' }, 'No decision yet: the first rounds are running.');
  return h('div', { class: 'table-scroll' }, h('table', { class: 'data ab-decisions' },
    h('thead', {}, h('tr', {}, ['Device', 'Config', 'Metric', 'Result', 'p (KS · MWU)', 'Change [interval]', 'Baseline → build (mean)', 'Samples A+B', 'CV', 'Why']
      .map((t, i) => h('th', { class: i >= 4 && i <= 8 ? 'r' : '' }, t)))),
    h('tbody', {}, ds.map((d) => h('tr', { 'data-config': d.config_key, 'data-metric': d.metric, class: 'outcome-' + d.outcome },
      h('td', { class: 'small' }, d.device_id),
      h('td', { class: 'mono small' }, d.config_key),
      h('td', {}, metricLabel(d.metric, false)),
      h('td', {}, verdictBadge(d.outcome)),
      h('td', { class: 'r num', title: 'min of the Kolmogorov–Smirnov and Mann–Whitney p-values; same above ' + fmtP(d.same_threshold) }, fmtP(d.p) + ' (' + fmtP(d.p_ks) + ' · ' + fmtP(d.p_mwu) + ')'),
      h('td', { class: ['r', 'num', d.outcome === 'regression' ? 'bad' : d.outcome === 'improvement' ? 'good' : ''] },
        fmtPct(d.change) + ' [' + fmtPct(d.change_low) + ', ' + fmtPct(d.change_high) + ']'),
      h('td', { class: 'r num' }, fmtValue(d.metric, d.mean_a) + ' → ' + fmtValue(d.metric, d.mean_b)),
      h('td', { class: 'r num samples' }, d.n_a + '+' + d.n_b),
      h('td', { class: 'r num' }, fmtPct(d.cv, false)),
      h('td', { class: 'small muted' }, d.reason))))));
}

function runsLine(a) {
  const by = {};
  for (const r of a.runs || []) by[r.state] = (by[r.state] || 0) + 1;
  return Object.entries(by).map(([s, n]) => n + ' ' + humanize(s)).join(' · ') || 'no runs';
}

function renderAB(root, a) {
  root.replaceChildren(h('p', {}, h('a', { href: '/builds/' + enc(a.build) }, '← Build ' + a.build)),
    h('div', { class: 'view-head' }, h('h2', {}, 'A/B #' + a.id + ' ', verdictBadge(a.verdict || (a.state === 'running' ? 'running' : ''))),
      h('p', { class: 'lede' }, buildLink(a.build), ' against baseline ', buildLink(a.baseline), ' · ' + a.suite + ' on ' + a.lineage)),
    h('section', { class: 'card ab-summary' },
      h('p', { class: 'ab-verdict' }, a.summary || (a.state === 'running' ? 'running: deciding after each round' : '')),
      h('dl', { class: 'meta wide' },
        h('dt', {}, 'rounds'), h('dd', { class: 'ab-rounds' }, a.rounds + ' of at most ' + a.max_rounds + ' (' + a.initial_rounds + ' first, then ' + a.step_rounds + ' more while unknown); a round is one run of each build per device, interleaved A B B A'),
        h('dt', {}, 'minimum effect'), h('dd', {}, fmtPct(a.min_effect, false)),
        h('dt', {}, 'devices'), h('dd', {}, (a.devices || []).join(', ') || '—'),
        h('dt', {}, 'runs'), h('dd', {}, runsLine(a)),
        h('dt', {}, 'started'), h('dd', {}, fmtTime(a.created_at) + (a.finished_at ? ', decided ' + fmtTime(a.finished_at) : ''))),
      (a.problems || []).length ? h('ul', { class: 'ab-problems bad small' }, a.problems.map((p) => h('li', {}, p))) : null),
    h('section', { class: 'card' }, h('h3', {}, 'Verdict per config and metric'), decisionsTable(a)),
    h('p', { class: 'small muted ab-cli' }, 'The same from a shell: ', code('lesfarm run --suite ' + a.suite + ' --build ' + a.build + ' --baseline ' + a.baseline + ' --wait')));
}

// render is /ab/{id}; a running comparison is read again every 5 s
// (reading it moves it on).
export async function render(root, id, ctx) {
  ctx.title('A/B #' + id);
  root.replaceChildren(h('p', { class: 'muted' }, 'loading A/B #' + id + '…'));
  let a;
  try {
    a = await api.getAB(id);
  } catch (e) {
    root.replaceChildren(e.status === 404 ? empty('A/B comparison #' + id + ' does not exist.') : errorBox(e, 'A/B #' + id));
    return;
  }
  renderAB(root, a);
  const again = () => setTimeout(async () => {
    if (!root.isConnected || a.state !== 'running') return;
    try { a = await api.getAB(id); renderAB(root, a); again(); } catch { /* keep the last view */ }
  }, 5000);
  again();
}

// abList fills box with the A/B comparisons of build id: those where it
// is under test ("against" its baseline) and those where it is the
// baseline of another build ("baseline for").
export async function abList(box, id) {
  try {
    const items = (await api.listAB({ build: id, side: 'either', limit: 20 })).items || [];
    box.replaceChildren(items.length ? h('ul', { class: 'build-ab-list' }, items.map((a) => h('li', { 'data-ab': a.id, 'data-side': a.build === id ? 'build' : 'baseline' },
      h('a', { href: '/ab/' + a.id }, 'A/B #' + a.id), ...(a.build === id ? [' against ', buildLink(a.baseline)] : [' baseline for ', buildLink(a.build)]),
      ' ', verdictBadge(a.verdict || a.state), ' ', h('span', { class: 'small' }, a.summary || ''))))
      : h('p', { class: 'muted ab-cli' }, 'No A/B comparison with this build: ', code('lesfarm run --build ' + id + ' --baseline auto --wait')));
  } catch (e) { box.replaceChildren(errorBox(e, 'the A/B comparisons of ' + id)); }
}
