// builds.js: the build registry (docs/builds.md): every build with its
// executables, and one build with each executable's Go build settings,
// its runs and its regression alerts. A build is code, registered by its
// executables' sha256; this is where a result's provenance points.

import * as api from './api.js';
import { h, code, empty, errorBox, badge } from './dom.js';
import { text } from './lineage.js';
import { fmtAgo, fmtTime, fmtBytes, shortSHA, shortHash } from './format.js';
import { deviceMap, runRow } from './runs.js';
import { abList } from './ab.js';

const enc = encodeURIComponent;

function kindBadge(b) {
  return b.kind === 'embedded'
    ? badge('embedded', 'emulated', 'an agent’s embedded runtime, registered when the agent said hello; runs in-process')
    : null;
}

function dirtyBadge(dirty) {
  return dirty ? badge('dirty', 'warn', 'built from a tree with uncommitted changes (vcs.modified): the git sha does not name all of its code') : null;
}

// exeChip names one executable: platform, short sha256 and size.
function exeChip(x) {
  return h('span', { class: 'chip exe', 'data-platform': x.platform, title: x.platform + ' sha256 ' + x.sha256 },
    x.platform + ' · ' + shortHash(x.sha256) + (x.size ? ' · ' + fmtBytes(x.size) : ''));
}

function runsLink(b) {
  return h('a', { href: '/runs?' + new URLSearchParams({ build: b.id, lineage: '*' }), title: 'runs of this build' }, String(b.runs));
}

function buildRow(b) {
  return h('tr', { 'data-build': b.id, 'data-lineage': b.lineage },
    h('td', { class: 'mono' }, h('a', { href: '/builds/' + enc(b.id) }, b.id), ' ', kindBadge(b)),
    h('td', { class: 'lineage', 'data-lineage': b.lineage }, b.lineage),
    h('td', { class: 'r num', title: 'order in the lineage, 1 the oldest' }, '#' + b.position),
    h('td', { class: 'mono git' }, b.git_sha ? h('span', { title: b.git_sha }, shortSHA(b.git_sha)) : h('span', { class: 'muted' }, '—'), ' ', dirtyBadge(b.dirty)),
    h('td', { class: 'exes' }, (b.executables || []).map(exeChip)),
    h('td', { title: fmtTime(b.pushed_at) }, fmtAgo(b.pushed_at), b.pushed_by ? h('span', { class: 'muted small' }, ' by ' + b.pushed_by) : null),
    h('td', { class: 'r num runs' }, runsLink(b)),
    h('td', { class: 'r num alerts' }, b.alerts ? h('a', { class: 'bad', href: '/builds/' + enc(b.id) + '#alerts', title: 'regression alert groups at this build' }, String(b.alerts)) : '0'));
}

// renderList is the Builds view: the builds of the selected lineage,
// newest position first (every lineage: most recently pushed first).
export async function renderList(root, q, ctx) {
  ctx.title('Builds');
  const lin = ctx.lineage || '';
  const head = h('div', { class: 'view-head' }, h('h2', {}, 'Builds'),
    h('p', { class: 'lede' }, 'Registered builds on ' + text(lin) + (lin ? ', newest first in lineage order' : ', most recently pushed first') +
      ': the executables every result names in its provenance.'));
  let page;
  try {
    page = await api.listBuilds({ lineage: lin, limit: 200 });
  } catch (e) {
    root.replaceChildren(head, errorBox(e, 'builds'));
    return;
  }
  const items = page.items || [];
  if (!items.length) {
    root.replaceChildren(head, empty(lin ? 'No builds on lineage ' + lin + '.' : 'No builds yet.',
      h('p', {}, 'Push one from CI: ', code('lesfarm build push ci-$BUILD --from-source . --lineage ' + (lin || 'main')),
        lin ? [' or ', h('a', { href: '/builds?lineage=*' }, 'show every lineage')] : null, '. See docs/builds.md.')));
    return;
  }
  const th = (t, title, r) => h('th', { class: r ? 'r' : '', title }, t);
  root.replaceChildren(head, h('table', { class: 'data builds-table' },
    h('thead', {}, h('tr', {}, th('Build'), th('Lineage', 'build lineage (branch)'), th('Position', 'order in the lineage', 1), th('Git sha'),
      th('Executables', 'platform · sha256 · size'), th('Pushed'), th('Runs', '', 1), th('Alerts', 'regression alert groups at this build', 1))),
    h('tbody', {}, items.map(buildRow))));
}

// settingsTable lists an executable's Go build settings.
function settingsTable(settings) {
  const keys = Object.keys(settings || {}).sort();
  if (!keys.length) return h('p', { class: 'muted small' }, 'No Go build settings recorded.');
  return h('table', { class: 'data settings' }, h('thead', {}, h('tr', {}, h('th', {}, 'Go build setting'), h('th', {}, 'Value'))),
    h('tbody', {}, keys.map((k) => h('tr', { 'data-key': k }, h('td', { class: 'mono' }, k), h('td', { class: 'mono' }, settings[k])))));
}

function exeCard(x) {
  const row = (k, v, cls) => (v === null || v === undefined || v === '' ? null : [h('dt', {}, k), h('dd', { class: cls }, v)]);
  return h('section', { class: 'card executable', 'data-platform': x.platform }, h('h3', {}, x.platform, ' ', dirtyBadge(x.dirty)),
    h('dl', { class: 'meta wide' },
      row('sha256', h('span', { class: 'mono' }, x.sha256), 'sha'),
      row('size', x.size ? fmtBytes(x.size) + ' (' + x.size.toLocaleString('en-US') + ' bytes)' : h('span', { class: 'muted' }, 'unknown (an agent’s own binary)')),
      row('Go version', x.go_version, 'go-version'),
      row('revision', x.revision ? h('span', { class: 'mono' }, x.revision) : h('span', { class: 'muted' }, 'not stamped (built without VCS information)'), 'revision')),
    settingsTable(x.settings));
}

// renderDetail is /builds/{id}.
export async function renderDetail(root, id, ctx) {
  ctx.title('Build ' + id);
  const back = h('p', {}, h('a', { href: '/builds?lineage=*' }, '← Builds'));
  let b;
  try {
    b = await api.getBuild(id);
  } catch (e) {
    root.replaceChildren(back, e.status === 404 ? empty('Build ' + id + ' is not registered.', e.message) : errorBox(e, 'build ' + id));
    return;
  }
  const row = (k, v) => (v === null || v === undefined || v === '' ? null : [h('dt', {}, k), h('dd', {}, v)]);
  const runsBox = h('div', {}, h('p', { class: 'muted' }, 'loading…'));
  const alertsBox = h('div', {}, h('p', { class: 'muted' }, 'loading…'));
  const abBox = h('div', {}, h('p', { class: 'muted' }, 'loading…'));
  root.replaceChildren(back,
    h('div', { class: 'view-head' }, h('h2', {}, 'Build ' + b.id, ' ', kindBadge(b), ' ', dirtyBadge(b.dirty)),
      h('p', { class: 'lede' }, '#' + b.position + ' in lineage ' + b.lineage + (b.git_sha ? ' at ' + shortSHA(b.git_sha) : ''))),
    h('section', { class: 'card' }, h('dl', { class: 'meta wide build-meta' },
      row('lineage', h('a', { class: 'lineage', 'data-lineage': b.lineage, href: '/builds?lineage=' + enc(b.lineage) }, b.lineage)),
      row('position', '#' + b.position + ' (1 is the oldest)'),
      row('kind', b.kind === 'embedded' ? 'embedded: an agent’s own runtime, run in-process' : 'exec: pushed executables, run by the agents as child processes'),
      row('git sha', b.git_sha ? h('span', { class: 'mono' }, b.git_sha) : h('span', { class: 'muted' }, 'none given')),
      row('tree', b.dirty ? h('span', { class: 'warn' }, 'dirty: built with uncommitted changes') : 'clean'),
      row('pushed', fmtTime(b.pushed_at) + ' (' + fmtAgo(b.pushed_at) + ')' + (b.pushed_by ? ' by ' + b.pushed_by : '')),
      row('runs', runsLink(b)),
      row('alerts', String(b.alerts)))),
    h('h3', {}, 'Executables'), h('div', { class: 'cards executables' }, (b.executables || []).map(exeCard)),
    h('section', { class: 'card build-runs' }, h('h3', {}, 'Runs of this build'), runsBox),
    h('section', { class: 'card build-alerts', id: 'alerts' }, h('h3', {}, 'Regression alerts at this build'), alertsBox),
    h('section', { class: 'card build-ab', id: 'ab' }, h('h3', {}, 'A/B comparisons: under test or as baseline'), abBox));
  await Promise.all([
    abList(abBox, b.id),
    (async () => {
      try {
        const [page, devices] = await Promise.all([api.listRuns({ build: b.id, limit: 50 }), deviceMap()]);
        const items = page.items || [];
        runsBox.replaceChildren(items.length ? h('table', { class: 'data runs-table' },
          h('thead', {}, h('tr', {}, ['Run', 'State', 'Suite', 'Lineage', 'Build', 'Device', 'Progress / outcome', 'Attempts', 'Created'].map((t) => h('th', {}, t)))),
          h('tbody', {}, items.map((r) => runRow(r, devices))))
          : empty('No runs of this build yet.', h('p', {}, 'Run it: ', code('lesfarm run --suite les-ladder --build ' + b.id + ' --fanout --wait'))),
        ...(page.next_cursor ? [h('p', { class: 'small' }, h('a', { href: '/runs?' + new URLSearchParams({ build: b.id, lineage: '*' }) }, 'All runs of this build →'))] : []));
      } catch (e) { runsBox.replaceChildren(errorBox(e, 'the runs of ' + b.id)); }
    })(),
    (async () => {
      try {
        const groups = (await api.listAlerts({ build: b.id, limit: 50 })).items || [];
        alertsBox.replaceChildren(groups.length ? h('ul', { class: 'build-alert-list' }, groups.map((g) => h('li', { 'data-group': g.id },
          h('a', { href: '/alerts/' + g.id }, '#' + g.id), ' ', badge(g.regression ? 'regression' : 'improvement', g.regression ? 'bad' : 'good'), ' ',
          badge(g.status, 'status-' + g.status), ' ', g.summary)))
          : h('p', { class: 'muted' }, 'No regression alert groups at this build.'));
      } catch (e) { alertsBox.replaceChildren(errorBox(e, 'the alerts of ' + b.id)); }
    })(),
  ]);
}
