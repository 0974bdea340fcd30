// runs.js: recent runs and one run with its per-config results.

import * as api from './api.js';
import { h, code, empty, errorBox, badge } from './dom.js';
import { renderInside } from './drill.js';
import { param, text } from './lineage.js';
import { fmtAgo, fmtTime, fmtDuration, parseGoDuration, fmtMeanSD, fmtValue, fmtBytes, fmtPct, shortSHA, humanize, stateTip, STATE_TIPS } from './format.js';

// STATES are the run states in filter order (format.js STATE_TIPS).
export const STATES = Object.keys(STATE_TIPS);
const ACTIVE = ['queued', 'assigned', 'running'];
const PAGE = 50;

export function stateBadge(state) {
  return badge(humanize(state), 'state state-' + state, stateTip(state) || undefined);
}

function ms(a, b) {
  if (!a || !b) return NaN;
  return new Date(b).getTime() - new Date(a).getTime();
}

export async function deviceMap() {
  try {
    const page = await api.listDevices({ limit: 1000 });
    return new Map((page.items || []).map((d) => [d.id, d]));
  } catch { return new Map(); }
}

function deviceCell(id, devices) {
  if (!id) return h('span', { class: 'muted' }, 'not placed');
  const d = devices.get(id);
  return h('span', {}, d ? d.device_model || id : id, d && d.device_model ? h('span', { class: 'muted small' }, ' ' + id) : null,
    d && d.emulated ? [' ', badge('emulated', 'emulated')] : null);
}

function outcomeCell(r) {
  if (r.state === 'running' || r.state === 'assigned') {
    const pct = Math.max(0, Math.min(1, r.progress || 0));
    return h('span', { class: 'progress-cell' }, h('progress', { max: 1, value: pct }), ' ' + Math.round(pct * 100) + '%',
      r.progress_message ? h('span', { class: 'muted small' }, ' ' + r.progress_message) : null);
  }
  if (r.error || r.cancel_reason) return h('span', { class: 'bad small clip', title: r.error || r.cancel_reason }, r.error || r.cancel_reason);
  if (r.state === 'succeeded') return h('span', { class: 'num' }, 'took ' + fmtDuration(ms(r.started_at, r.finished_at)));
  if (r.state === 'queued') return h('span', { class: 'muted' }, 'waiting ' + fmtDuration(Date.now() - new Date(r.queued_at).getTime()));
  return '';
}

export function runRow(r, devices) {
  return h('tr', { 'data-run-id': r.id, 'data-state': r.state },
    h('td', {}, h('a', { href: '/runs/' + r.id }, '#' + r.id)),
    h('td', {}, stateBadge(r.state)),
    h('td', {}, r.suite),
    h('td', { class: 'lineage', 'data-lineage': r.lineage || '' }, r.lineage || '—'),
    h('td', { class: 'mono' }, r.build ? h('a', { href: '/builds/' + encodeURIComponent(r.build), title: 'the build' }, r.build) : '—', r.git_sha ? h('span', { class: 'muted small' }, ' ' + shortSHA(r.git_sha)) : null),
    h('td', {}, deviceCell(r.device_id || r.target_device_id, devices)),
    h('td', {}, outcomeCell(r)),
    h('td', { class: 'r num' }, r.attempts + ' / ' + r.max_attempts),
    h('td', { title: fmtTime(r.created_at) }, fmtAgo(r.created_at)));
}

// renderList is the Runs view.
export async function renderList(root, q, ctx) {
  ctx.title('Runs');
  const lin = ctx.lineage || '', P = encodeURIComponent(param(lin));
  const state = q.get('state') || '', suite = q.get('suite') || '', build = q.get('build') || '', deviceID = q.get('device_id') || '';
  const form = h('form', { class: 'filters', onsubmit: (ev) => { ev.preventDefault(); apply(); } },
    h('label', {}, 'state', h('select', { name: 'state' }, h('option', { value: '' }, 'any'), h('option', { value: 'active', selected: state === 'active' }, 'active (queued, assigned, running)'),
      STATES.map((x) => h('option', { value: x, selected: x === state, title: stateTip(x) }, humanize(x))))),
    h('label', {}, 'suite', h('input', { name: 'suite', value: suite, size: 12, placeholder: 'all' })),
    h('label', {}, 'build', h('input', { name: 'build', value: build, size: 14, placeholder: 'any' })),
    deviceID ? h('label', {}, 'device', h('span', { class: 'chip device-filter' }, deviceID, ' ', h('a', { href: '/runs?lineage=' + P, title: 'all devices', 'aria-label': 'clear the device filter' }, '✕'))) : null,
    deviceID ? h('input', { type: 'hidden', name: 'device_id', value: deviceID }) : null,
    h('button', { class: 'btn', type: 'submit' }, 'Apply'));
  const apply = () => {
    const p = new URLSearchParams();
    for (const el of form.elements) if (el.name && el.value) p.set(el.name, el.value);
    p.set('lineage', param(lin));
    ctx.navigate('/runs?' + p);
  };
  form.state.addEventListener('change', apply);
  const tbody = h('tbody', {});
  const table = h('table', { class: 'data runs-table' }, h('thead', {}, h('tr', {}, h('th', {}, 'Run'), h('th', {}, 'State'), h('th', {}, 'Suite'),
    h('th', { title: 'build lineage (branch)' }, 'Lineage'), h('th', {}, 'Build'), h('th', {}, 'Device'), h('th', {}, 'Progress / outcome'), h('th', { class: 'r' }, 'Attempts'), h('th', {}, 'Created'))), tbody);
  const out = h('div', {});
  const more = h('button', { class: 'btn more', type: 'button', hidden: true }, 'Load older runs');
  root.replaceChildren(h('div', { class: 'view-head' }, h('h2', {}, 'Runs'), h('p', { class: 'lede' }, 'Recent runs on ' + text(lin) + ', newest first. Refreshes every 10 s.')), form, out, more);

  const params = { suite, build, lineage: lin, device_id: deviceID, state: state === 'active' ? ACTIVE : state ? [state] : undefined, limit: PAGE };
  let cursor = 0, pages = 0;
  const devices = await deviceMap();
  const load = async (reset) => {
    let page;
    try {
      page = await api.listRuns({ ...params, cursor: reset ? undefined : cursor || undefined });
    } catch (e) {
      out.replaceChildren(errorBox(e, 'runs'));
      return;
    }
    const items = page.items || [];
    if (reset) { tbody.replaceChildren(); pages = 0; }
    pages++;
    if (!items.length && pages === 1) {
      out.replaceChildren(state || suite || build || deviceID
        ? empty('No runs match these filters.', h('p', {}, 'Searched ' + text(lin) + '. ', h('a', { href: '/runs?lineage=' + P }, 'Show all runs'),
          lin ? [' · ', h('a', { href: '/runs?' + new URLSearchParams({ ...Object.fromEntries(q), lineage: '*' }) }, 'search every lineage')] : null))
        : lin ? empty('No runs on lineage ' + lin + '.', h('p', {}, 'Trigger one with ', code('lesfarm run --lineage ' + lin + ' --suite smoke --build $BUILD'),
          ' or ', h('a', { href: '/runs?lineage=*' }, 'show every lineage'), '.'))
        : empty('No runs yet.', h('p', {}, 'Trigger one with ', code('lesfarm run --suite smoke --build $BUILD --wait'),
          ' (or POST /v1/runs). It is queued until a matching device is online; see ', h('a', { href: '/devices' }, 'Devices'), '.')));
      more.hidden = true;
      return;
    }
    tbody.append(...items.map((r) => runRow(r, devices)));
    if (!table.isConnected) out.replaceChildren(table);
    cursor = page.next_cursor || 0;
    more.hidden = !cursor;
  };
  more.onclick = () => load(false);
  await load(true);
  ctx.every(10000, async () => { if (pages <= 1) await load(true); });
}

function resultsTable(results) {
  const th = (t, r) => h('th', { class: r ? 'r' : '' }, t);
  return h('table', { class: 'data results-table' },
    h('thead', {}, h('tr', {}, th('Config'), th('Valid'), th('Decode', 1), th('CV', 1), th('Prefill', 1), th('TTFT', 1), th('Peak memory', 1),
      th('Hit rate', 1), th('Recall', 1), th('Stall', 1), th('Bytes/token', 1), th('Reps', 1))),
    h('tbody', {}, results.map((r) => h('tr', { 'data-config': r.config_key },
      h('td', { class: 'mono small' }, r.config_key || '#' + r.config_index),
      h('td', {}, r.error ? badge('error', 'bad', r.error) : r.valid ? badge('valid', 'good') : badge('invalid', 'warn', r.invalid_reason)),
      h('td', { class: 'r num decode' }, fmtMeanSD('decode_tps', r.decode_tps.mean, r.decode_tps.stddev)),
      h('td', { class: 'r num' }, r.decode_tps.cv ? fmtPct(r.decode_tps.cv, false) : '—'),
      h('td', { class: 'r num' }, fmtMeanSD('prefill_tps', r.prefill_tps.mean, r.prefill_tps.stddev)),
      h('td', { class: 'r num' }, fmtMeanSD('ttft_ms', r.ttft_ms.mean, r.ttft_ms.stddev)),
      h('td', { class: 'r num' }, r.peak_memory_bytes ? fmtBytes(r.peak_memory_bytes) : '—'),
      h('td', { class: 'r num' }, fmtValue('hit_rate', r.hit_rate)),
      h('td', { class: 'r num' }, fmtValue('predictor_recall', r.predictor_recall)),
      h('td', { class: 'r num' }, fmtValue('stall_fraction', r.stall_fraction)),
      h('td', { class: 'r num' }, r.bytes_per_token ? fmtValue('bytes_per_token', r.bytes_per_token) : '—'),
      h('td', { class: 'r num', title: 'measured repetitions (warm-up runs)' }, r.repetitions + (r.warmup ? ' (+' + r.warmup + ')' : ''))))));
}

// provenanceCard shows which code produced the run's result, as the agent
// reported it and ingest checked it: the build's executable (its sha256
// and platform), whether the agent ran it as a child process or its
// embedded runtime, what the runner said it was built from, its peak RSS
// and, when the build failed, the tail of its stderr (as text).
function provenanceCard(r) {
  const p = r.provenance;
  if (!p) return ACTIVE.includes(r.state) ? null : h('section', { class: 'card provenance' }, h('h3', {}, 'Code that ran'), h('p', { class: 'muted' }, 'No provenance recorded: no result was stored, or it came from an agent older than the build registry.'));
  const row = (k, v, cls) => (v === null || v === undefined || v === '' ? null : [h('dt', {}, k), h('dd', { class: cls }, v)]);
  return h('section', { class: 'card provenance' }, h('h3', {}, 'Code that ran'),
    h('dl', { class: 'meta wide' },
      row('build', p.build ? h('a', { class: 'mono', href: '/builds/' + encodeURIComponent(p.build) }, p.build) : null),
      row('executable sha256', h('span', { class: 'mono', title: 'sha256 of the executable that ran; ingest checked it is the build’s for this platform' }, p.executable_sha256 || '—'), 'exe-sha'),
      row('platform', p.platform, 'platform'),
      row('ran as', p.embedded ? 'the agent’s embedded runtime, in-process' : 'a child process (the build’s own executable)', 'ran-as'),
      row('runner revision', p.runner_revision ? h('span', { class: 'mono' }, p.runner_revision) : h('span', { class: 'muted' }, 'not stamped (built without VCS information)'), 'revision'),
      row('runner Go version', p.runner_go_version, 'go-version'),
      row('runner protocol', p.runner_protocol ? 'v' + p.runner_protocol : null),
      row('agent build', p.agent_build ? h('span', { class: 'mono' }, p.agent_build) : null),
      row('peak RSS', p.peak_rss_bytes ? fmtBytes(p.peak_rss_bytes) : p.embedded ? h('span', { class: 'muted' }, 'not measured (in-process)') : null, 'peak-rss')),
    p.stderr_tail ? [h('h4', {}, r.state === 'build_failed' ? 'The build failed: the last of its stderr' : 'The last of its stderr'),
      h('pre', { class: 'stderr-tail' }, p.stderr_tail)] : null);
}

// renderDetail is /runs/{id}.
export async function renderDetail(root, id, ctx, q = new URLSearchParams()) {
  ctx.title('Run #' + id);
  const draw = async () => {
    let r;
    try {
      r = await api.getRun(id);
    } catch (e) {
      root.replaceChildren(h('p', {}, h('a', { href: '/runs?lineage=*' }, '← Runs')), e.status === 404 ? empty('Run #' + id + ' does not exist.') : errorBox(e, 'run #' + id));
      return true;
    }
    const devices = await deviceMap();
    const row = (k, v) => (v === null || v === undefined || v === '' ? null : [h('dt', {}, k), h('dd', {}, v)]);
    const results = r.results || [];
    const L = r.lineage ? h('a', { class: 'lineage', 'data-lineage': r.lineage, href: '/runs?lineage=' + encodeURIComponent(r.lineage), title: 'runs of this lineage' }, r.lineage) : null;
    root.replaceChildren(h('p', {}, h('a', { href: '/runs?lineage=' + encodeURIComponent(param(r.lineage)) }, '← Runs')),
      h('div', { class: 'view-head' }, h('h2', {}, 'Run #' + r.id + ' ', stateBadge(r.state)),
        h('p', { class: 'lede' }, r.suite + ' on build ' + r.build + ' · ' + text(r.lineage))),
      h('section', { class: 'card' }, h('dl', { class: 'meta wide' },
        row('suite', h('a', { href: '/series?suite=' + encodeURIComponent(r.suite) }, r.suite)),
        row('job', r.job ? r.job.name + ' (#' + r.job.id + ')' : null),
        row('lineage', L),
        row('build', r.build ? h('a', { class: 'mono', href: '/builds/' + encodeURIComponent(r.build), title: 'the build: its executables, runs and alerts' }, r.build) : null),
        row('git sha', r.git_sha ? h('span', { class: 'mono' }, r.git_sha) : null),
        row('A/B', r.ab_id ? h('a', { class: 'ab-link', href: '/ab/' + r.ab_id, title: 'the comparison this run is a side of' }, 'A/B #' + r.ab_id) : null),
        row('device', deviceCell(r.device_id || r.target_device_id, devices)),
        row('attempts', r.attempts + ' of ' + r.max_attempts),
        row('progress', ACTIVE.includes(r.state) ? outcomeCell(r) : null),
        row('error', r.error ? h('span', { class: 'bad' }, r.error) : null),
        row('cancel reason', r.cancel_reason || null),
        row('timeout', r.timeout && fmtDuration(parseGoDuration(r.timeout))),
        row('created', fmtTime(r.created_at) + ' (' + fmtAgo(r.created_at) + ')'),
        row('started', r.started_at ? fmtTime(r.started_at) : null),
        row('finished', r.finished_at ? fmtTime(r.finished_at) : null),
        row('duration', r.started_at && r.finished_at ? fmtDuration(ms(r.started_at, r.finished_at)) : null))),
      ...[provenanceCard(r)].filter(Boolean),
      h('section', { class: 'card' }, h('h3', {}, 'Results per config'),
        results.length ? h('div', { class: 'table-scroll' }, resultsTable(results)) : empty(ACTIVE.includes(r.state) ? 'No results yet: the run is ' + humanize(r.state) + '.' : 'This run recorded no results.'),
        h('p', { class: 'muted small' }, 'Values are means over the measured repetitions ± their standard deviation; CV is stddev / mean of decode throughput. ',
          'Raw JSON: ', h('a', { href: '/v1/runs/' + r.id, target: '_blank', rel: 'noopener' }, '/v1/runs/' + r.id))));
    if (ACTIVE.includes(r.state)) return false;
    // Finished: the inside of the run, drawn once (it does not change).
    const inside = renderInside(r, q, ctx);
    if (inside) {
      root.append(inside);
      await inside.ready;
    }
    return true;
  };
  const done = await draw();
  if (!done) ctx.every(5000, draw);
}
