// regressions.js: alert groups, newest first, with their alerts, the LES
// metrics that moved with them (attribution) and triage.

import * as api from './api.js';
import { h, code, empty, errorBox, badge } from './dom.js';
import { fmtAgo, fmtTime, fmtValue, fmtPct, fmtP, metricInfo, metricLabel, humanize } from './format.js';
import { seriesChart } from './series.js';
import { param, sortLineages, text } from './lineage.js';
import { bisectPanel } from './bisect.js';

const STATUSES = ['new', 'acknowledged', 'invalid', 'fixed', 'reassigned'];
const PAGE = 20;
const enc = encodeURIComponent;

// lineageBadge links a group's lineage to its regressions.
function lineageBadge(l) {
  return h('a', { class: 'badge lineage', href: '/?lineage=' + enc(param(l)), 'data-lineage': l || '', title: 'build lineage (branch): show its regressions' }, text(l));
}

function scopeText(g) {
  const what = { device: 'device-specific', platform: 'platform', global: 'global' }[g.scope] || g.scope || 'unknown scope';
  return g.scope_detail ? what + ' · ' + g.scope_detail : what;
}

function seriesText(sr) {
  const parts = [sr.device_model || '(unknown device)'];
  if (sr.os_major) parts.push('OS ' + sr.os_major);
  if (sr.emulated) parts.push('emulated');
  return parts.join(' · ');
}

function seriesLink(g, a) {
  const q = new URLSearchParams({ suite: g.suite, metric: a.series.metric });
  if (a.series.config) q.set('config', a.series.config);
  if (a.series.lineage) q.set('lineage', a.series.lineage);
  return '/series?' + q;
}

// attributionRows renders what moved with an alert.
function attributionList(a) {
  let attrs = a.attribution;
  if (typeof attrs === 'string') { try { attrs = JSON.parse(attrs); } catch { attrs = []; } }
  if (!Array.isArray(attrs) || !attrs.length) return null;
  return h('ul', { class: 'attribution' }, attrs.map((x) => h('li', {},
    h('span', { class: 'attr-metric' }, metricInfo(x.metric).label + (x.layers ? ' (layers ' + x.layers + ')' : '')), ' ',
    h('span', { class: 'num' }, fmtValue(x.metric, x.before) + ' → ' + fmtValue(x.metric, x.after)), ' ',
    h('span', { class: ['num', x.direction === 'regression' ? 'bad' : x.direction === 'improvement' ? 'good' : ''] }, fmtPct(x.relative_change)), ' ',
    h('span', { class: 'muted num' }, fmtP(x.p_value)))));
}

// changedAt says where an alert's change happened, from its location range:
// after the last surely-good build, by the newest build that may be the
// first bad one (seqs where the builds are unknown); '—' without a range.
function changedAt(a) {
  if (!a.first_bad_seq) return '—';
  const bad = a.first_bad_build || 'seq ' + a.first_bad_seq;
  if (!a.last_good_seq) return 'by ' + bad;
  return 'after ' + (a.last_good_build || 'seq ' + a.last_good_seq) + ', by ' + bad;
}

// devicesList renders the devices an alert rests on (GET /v1/alerts/{id}):
// each with its points before / from the change and its own change, those
// that carry the alert's change marked; null without any.
function devicesList(a) {
  const ds = a.devices || [];
  if (!ds.length) return null;
  return h('ul', { class: 'attribution alert-devices' }, ds.map((d) => h('li', { 'data-device': d.device_id || '', class: d.carries ? 'carries' : 'dissents' },
    h('span', { class: 'mono' }, d.device_id || '(unknown device)'), ' ',
    h('span', { class: 'muted num', title: 'its points before / from the change' }, (d.before || 0) + '/' + (d.after || 0)), ' ',
    d.after ? h('span', { class: ['num', d.carries ? (a.direction === 'regression' ? 'bad' : 'good') : ''] }, fmtPct(d.relative_change)) : h('span', { class: 'muted' }, 'no point after'),
    d.after ? h('span', { class: 'muted' }, d.carries ? ' carries it' : ' does not show it') : null)));
}

// alertsTable renders the alerts of a group (from GET /v1/alerts/{id}).
function alertsTable(g) {
  const alerts = (g.alerts || []).slice().sort((a, b) => {
    const la = metricInfo(a.series.metric).les ? 1 : 0, lb = metricInfo(b.series.metric).les ? 1 : 0;
    return la - lb || Math.abs(b.relative_change) - Math.abs(a.relative_change);
  });
  if (!alerts.length) return h('p', { class: 'muted' }, 'This group has no alerts.');
  return h('table', { class: 'data alerts' },
    h('thead', {}, h('tr', {}, h('th', {}, 'Metric'), h('th', {}, 'Series'), h('th', {}, 'Config'),
      h('th', { title: 'where the change happened: after the last surely-good build, by the newest build that may be the first bad one' }, 'Changed'),
      h('th', { class: 'r' }, 'Before → after (mean)'),
      h('th', { class: 'r' }, 'Change'), h('th', { class: 'r' }, 'Confidence'), h('th', { class: 'r', title: 'results before / after the change' }, 'n before / after'), h('th', {}, ''))),
    h('tbody', {}, alerts.map((a) => {
      const attr = attributionList(a);
      const devs = devicesList(a);
      const one = a.carried_by_one_device ? badge('one device', 'warn one-device', 'one device alone shows this change while other devices of the model with points after it do not: an enrolled device can report wrong numbers, so check that device before acting') : null;
      return [
        h('tr', { 'data-alert-id': a.id, class: attr ? 'has-attr' : '' },
          h('td', {}, metricLabel(a.series.metric, false), one ? [' ', one] : null),
          h('td', {}, seriesText(a.series)),
          h('td', { class: 'mono small' }, a.series.config || '—'),
          h('td', { class: 'small changed-at', title: 'change placed at seq ' + a.seq }, changedAt(a)),
          h('td', { class: 'r num' }, fmtValue(a.series.metric, a.before_mean) + ' → ' + fmtValue(a.series.metric, a.after_mean)),
          h('td', { class: ['r', 'num', a.direction === 'regression' ? 'bad' : 'good'] }, fmtPct(a.relative_change)),
          h('td', { class: 'r num' }, fmtP(a.p_value)),
          h('td', { class: 'r num', title: 'results before / after the change' }, (a.before_n || 0) + ' / ' + (a.after_n || 0)),
          h('td', {}, h('a', { href: seriesLink(g, a) }, 'chart'))),
        attr ? h('tr', { class: 'attr-row' }, h('td', {}, ''), h('td', { colspan: 8 }, h('span', { class: 'muted' }, 'moved with it: '), attr)) : null,
        devs ? h('tr', { class: 'attr-row devices-row', 'data-alert-devices': a.id }, h('td', {}, ''), h('td', { colspan: 8 }, h('span', { class: 'muted' }, 'devices: '), devs)) : null,
      ];
    })));
}

// triagePanel renders the status buttons and note of a group; onDone gets
// the updated group.
function triagePanel(g, onDone) {
  const note = h('input', { type: 'text', class: 'note', placeholder: 'note (why, link to bug, …)', value: g.note || '', maxlength: 10000, 'aria-label': 'triage note' });
  const reassign = h('input', { type: 'text', class: 'reassign', placeholder: 'build', value: g.reassigned_to || '', maxlength: 200, 'aria-label': 'reassign to build', size: 12 });
  const msg = h('span', { class: 'triage-msg', role: 'status' });
  const send = async (status) => {
    if (!api.getToken()) {
      msg.className = 'triage-msg bad';
      msg.replaceChildren('Triage needs an API token: use “API token” at the top right (create one with ', code('lesfarm token create --name NAME'), ').');
      document.dispatchEvent(new Event('lesfarm-ask-token'));
      return;
    }
    if (status === 'reassigned' && !reassign.value.trim()) {
      msg.className = 'triage-msg bad';
      msg.textContent = 'Give the build this regression really belongs to.';
      reassign.focus();
      return;
    }
    for (const b of buttons) b.disabled = true;
    msg.className = 'triage-msg muted';
    msg.textContent = 'saving…';
    try {
      const body = { status, note: note.value.trim() };
      if (status === 'reassigned') body.reassigned_to = reassign.value.trim();
      const ng = await api.triageAlert(g.id, body);
      msg.className = 'triage-msg good';
      msg.textContent = 'Marked ' + ng.status + '.';
      onDone(ng);
    } catch (e) {
      msg.className = 'triage-msg bad';
      msg.textContent = e.status === 401 ? 'The coordinator rejected the API token (' + e.message + ').' : e.message;
      for (const b of buttons) b.disabled = false;
    }
  };
  const btn = (status, label, cls) => h('button', { type: 'button', class: ['btn', cls], 'data-status': status, disabled: g.status === status, onclick: () => send(status) }, label);
  const buttons = [
    btn('acknowledged', 'Acknowledge', 'btn-primary'),
    btn('invalid', 'Invalid', ''),
    btn('fixed', 'Fixed', ''),
    btn('reassigned', 'Reassign to', ''),
  ];
  if (g.status !== 'new') buttons.push(btn('new', 'Reopen', 'btn-quiet'));
  return h('div', { class: 'triage' }, note, buttons.slice(0, 3), h('span', { class: 'reassign-box' }, buttons[3], reassign), buttons.slice(4), msg);
}

// groupCard renders one alert group; detail (with alerts) may come later.
function groupCard(g, { full = false } = {}) {
  const card = h('article', { class: ['card', 'alert-card', 'status-' + g.status], 'data-id': g.id, 'data-status': g.status });
  const draw = (grp) => {
    card.setAttribute('data-status', grp.status);
    card.className = 'card alert-card status-' + grp.status;
    const head = h('div', { class: 'card-head' },
      badge(grp.regression ? '▼ regression' : '▲ improvement', grp.regression ? 'bad' : 'good'),
      badge(grp.status, 'status status-' + grp.status),
      badge(scopeText(grp), 'scope', 'device-specific: one device model; platform: several models of one platform; global: across platforms'),
      lineageBadge(grp.lineage),
      grp.confirmation && grp.confirmation !== 'none' ? badge('confirmation ' + grp.confirmation, 'confirm-' + grp.confirmation) : null,
      h('span', { class: 'spacer' }),
      h('a', { class: 'muted', href: '/alerts/' + grp.id, title: fmtTime(grp.created_at) }, '#' + grp.id + ' · ' + fmtAgo(grp.created_at)));
    const meta = h('dl', { class: 'meta' },
      h('dt', {}, 'suite'), h('dd', {}, grp.suite),
      h('dt', {}, 'build at change'), h('dd', { class: 'mono' },
        grp.build ? h('a', { href: '/runs?' + new URLSearchParams({ build: grp.build, suite: grp.suite, lineage: param(grp.lineage) }), title: 'runs of this build' }, grp.build) : 'unknown',
        ' ', h('span', { class: 'muted' }, '(seq ' + grp.seq + ')')),
      grp.reassigned_to ? [h('dt', {}, 'reassigned to'), h('dd', { class: 'mono' }, grp.reassigned_to)] : null);
    const body = h('div', { class: 'card-body' });
    if (grp.alerts) body.append(alertsTable(grp));
    else body.append(h('p', { class: 'muted loading' }, 'loading alerts…'));
    const noteLine = grp.note ? h('p', { class: 'note-line' }, h('span', { class: 'muted' }, 'note (' + fmtAgo(grp.updated_at) + '): '), grp.note) : null;
    card.replaceChildren(...[head, h('p', { class: 'summary' }, grp.summary || '(no summary)'), meta, body, noteLine,
      triagePanel(grp, (ng) => { ng.alerts = ng.alerts || grp.alerts; draw(ng); })].filter(Boolean));
  };
  draw(g);
  card.setDetail = (d) => draw(d);
  card.setDetailError = (e) => {
    const b = card.querySelector('.card-body');
    if (b) b.replaceChildren(h('p', { class: 'bad' }, 'Could not load the alerts: ' + e.message));
  };
  return card;
}

async function loadDetails(cards) {
  const queue = cards.slice();
  const worker = async () => {
    for (let c; (c = queue.shift());) {
      try { c.setDetail(await api.getAlert(c.dataset.id)); } catch (e) { c.setDetailError(e); }
    }
  };
  await Promise.all([worker(), worker(), worker(), worker()]);
}

function select(name, label, options, value) {
  return h('label', {}, label, h('select', { name }, options.map(([v, t]) => h('option', { value: v, selected: v === value }, t))));
}

// renderList is the Regressions view.
export async function renderList(root, q, ctx) {
  ctx.title('Regressions');
  const lin = ctx.lineage || '', P = enc(param(lin));
  const f = {
    status: q.get('status') || '', regression: q.get('regression') ?? 'true', scope: q.get('scope') || '',
    suite: q.get('suite') || '', build: q.get('build') || '',
  };
  const form = h('form', { class: 'filters', onsubmit: (ev) => { ev.preventDefault(); apply(); } },
    select('regression', 'kind', [['true', 'regressions'], ['false', 'improvements'], ['', 'both']], f.regression),
    select('status', 'status', [['', 'any'], ...STATUSES.map((x) => [x, x])], f.status),
    select('scope', 'scope', [['', 'any'], ['device', 'device-specific'], ['platform', 'platform'], ['global', 'global']], f.scope),
    h('label', {}, 'suite', h('input', { name: 'suite', value: f.suite, size: 12, placeholder: 'all' })),
    h('label', {}, 'build', h('input', { name: 'build', value: f.build, size: 14, placeholder: 'any' })),
    h('button', { class: 'btn', type: 'submit' }, 'Apply'));
  const apply = () => {
    const p = new URLSearchParams();
    for (const el of form.elements) if (el.name && (el.value !== '' || el.name === 'regression')) p.set(el.name, el.value);
    if (p.get('regression') === 'true') p.delete('regression');
    p.set('lineage', param(lin));
    ctx.navigate('/' + (p.toString() ? '?' + p : ''));
  };
  for (const el of form.querySelectorAll('select')) el.addEventListener('change', apply);
  const list = h('div', { class: 'cards', id: 'alert-list' });
  const pending = h('p', { class: 'pending-line', role: 'status' });
  const more = h('button', { class: 'btn more', type: 'button', hidden: true }, 'Load older alerts');
  root.replaceChildren(h('div', { class: 'view-head' }, h('h2', {}, 'Regressions'),
    h('p', { class: 'lede' }, 'Alert groups on ' + text(lin) + ', newest first: confirmed change points of one suite and build lineage at about one build, across devices and metrics.')),
  pending, form, list, more);
  // How many regressions still wait for triage, whatever the filters.
  // On the selected lineage, then how many on the others.
  api.listAlerts({ status: 'new', regression: 'true', limit: 500 }).then((p) => {
    const items = p.items || [], by = new Map();
    for (const g of items) by.set(g.lineage, (by.get(g.lineage) || 0) + 1);
    const n = lin ? by.get(lin) || 0 : items.length;
    const others = sortLineages([...by.keys()].filter((l) => l !== lin));
    const out = n ? [h('strong', {}, (n >= 500 ? '500+' : n) + (n === 1 ? ' regression awaits' : ' regressions await') + ' triage' + (lin ? ' on ' + lin : '')),
      ...(f.status === 'new' ? [] : [' · ', h('a', { href: '/?status=new&lineage=' + P }, 'show only those')])] : [];
    if (others.length > (lin ? 0 : 1)) {
      out.push(out.length ? ' · ' : '', h('span', { class: 'other-lineages' }, lin ? 'on other lineages: ' : 'by lineage: ',
        others.map((l, i) => [i ? ', ' : '', h('a', { href: '/?status=new&lineage=' + enc(l), 'data-lineage': l }, l + ' ' + by.get(l))])));
    }
    pending.replaceChildren(...out);
  }).catch(() => {});

  let cursor = 0;
  const params = { status: f.status, regression: f.regression, scope: f.scope, suite: f.suite, build: f.build, lineage: lin, limit: PAGE };
  const load = async () => {
    let page;
    try {
      page = await api.listAlerts({ ...params, cursor: cursor || undefined });
    } catch (e) {
      list.append(errorBox(e, 'alerts'));
      return;
    }
    const items = page.items || [];
    if (!items.length && !cursor) {
      const filtered = f.status || f.scope || f.suite || f.build || f.regression !== 'true';
      list.replaceChildren(filtered
        ? empty('No alert groups match these filters.', h('p', {}, 'Searched ' + text(lin) + '. ', h('a', { href: '/?lineage=' + P }, 'Show all regressions'),
          lin ? [' · ', h('a', { href: '/?' + new URLSearchParams({ ...Object.fromEntries(new URLSearchParams(location.search)), lineage: '*' }) }, 'search every lineage')] : null))
        : lin ? empty('No regressions on lineage ' + lin + '.', h('p', {}, 'Its builds raised no alert group yet. ', h('a', { href: '/?lineage=*' }, 'Show every lineage')))
        : empty('No regressions detected.',
          'Alerts appear here when the detector confirms a change point in a series: a metric of one suite, config and device model that moved between builds beyond its noise.',
          h('p', {}, 'Series fill as runs finish. Trigger runs for each build, e.g. ', code('lesfarm run --suite smoke --build $BUILD --wait'),
            ', or schedule them nightly; a few results per build lineage are needed before a change can be confirmed.')));
      more.hidden = true;
      return;
    }
    const cards = items.map((g) => groupCard(g));
    list.append(...cards);
    cursor = page.next_cursor || 0;
    more.hidden = !cursor;
    await loadDetails(cards);
  };
  more.onclick = () => load();
  await load();
}

// renderDetail is /alerts/{id}: one group, its alerts and the chart of
// its headline metric across device models around the change.
export async function renderDetail(root, id, ctx) {
  ctx.title('Alert #' + id);
  root.replaceChildren(h('p', { class: 'muted' }, 'loading alert #' + id + '…'));
  let g;
  try {
    g = await api.getAlert(id);
  } catch (e) {
    root.replaceChildren(h('p', {}, h('a', { href: '/?lineage=*' }, '← Regressions')), e.status === 404 ? empty('Alert group #' + id + ' does not exist.') : errorBox(e, 'alert #' + id));
    return;
  }
  const card = groupCard(g, { full: true });
  const charts = h('div', { class: 'detail-charts' });
  root.replaceChildren(h('p', {}, h('a', { href: '/?lineage=' + enc(param(g.lineage)) }, '← Regressions')),
    h('div', { class: 'view-head' }, h('h2', {}, 'Alert group #' + g.id), h('p', { class: 'lede' }, g.suite + ' on ' + text(g.lineage))), card, await bisectPanel(g), charts);
  // One chart per (metric, config) of the group's headline alerts, all
  // device models, so a device-specific change stands out from a global one.
  const seen = new Set();
  const heads = (g.alerts || []).filter((a) => !metricInfo(a.series.metric).les);
  for (const a of (heads.length ? heads : g.alerts || []).slice(0, 4)) {
    const key = a.series.metric + '\u0000' + a.series.config + '\u0000' + a.series.lineage;
    if (seen.has(key)) continue;
    seen.add(key);
    const box = h('section', { class: 'card chart-card' }, h('h3', {}, metricLabel(a.series.metric) + ' · ' + (a.series.config || 'all configs') + ' · ' + text(a.series.lineage)));
    charts.append(box);
    const chart = await seriesChart({ suite: g.suite, metric: a.series.metric, config: a.series.config, lineage: a.series.lineage, last: 60 }, ctx);
    box.append(chart);
    if (chart.layout) chart.layout();
  }
}
