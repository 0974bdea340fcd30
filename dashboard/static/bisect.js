// bisect.js: the alert page's bisection panel (docs/bisect.md): its
// builds, its steps with samples per side, p-values and the change's
// interval, and the culprit with its sha and the git log range; a button
// starts one when the group has none.

import * as api from './api.js';
import { h, code, badge } from './dom.js';
import { fmtPct, fmtP, shortSHA, humanize } from './format.js';

const enc = encodeURIComponent;
const KIND = { good: 'good', bad: 'bad', culprit: 'good', not_reproduced: '', ambiguous: 'warn', failed: 'bad' };

function buildLink(b) {
  return h('a', { class: 'mono', href: '/builds/' + enc(b.id), title: b.git_sha || 'no git sha' }, b.id);
}

// stepsTable lists the steps: B against A, samples, p, change, verdict.
function stepsTable(b) {
  return h('table', { class: 'data bisect-steps' },
    h('thead', {}, h('tr', {}, ['Step', 'Compared', 'Device', 'Samples A+B', 'p', 'Change [95%]', 'Result'].map((t, i) => h('th', { class: i >= 3 && i <= 5 ? 'r' : '' }, t)))),
    h('tbody', {}, b.steps.map((s) => h('tr', { 'data-step': s.step, class: 'step-' + s.state },
      h('td', {}, s.step + ' · ' + s.kind),
      h('td', { class: 'mono small' }, s.build_b + ' vs ' + s.build_a),
      h('td', { class: 'small' }, s.device_id),
      h('td', { class: 'r num samples' }, s.state === 'done' ? s.n_a + '+' + s.n_b : (s.runs && s.runs.succeeded || 0) + '/' + 2 * s.rounds + ' runs'),
      h('td', { class: 'r num' }, s.state === 'done' ? fmtP(s.p) : '—'),
      h('td', { class: 'r num' }, s.state === 'done' ? fmtPct(s.change) + ' [' + fmtPct(s.change_low) + ', ' + fmtPct(s.change_high) + ']' : '—'),
      h('td', { class: 'small' }, s.state === 'done' ? s.summary.split(':')[0] : s.state === 'aborted' ? h('span', { class: 'muted' }, s.note) : 'running' + (s.note ? ' — ' + s.note : ''))))));
}

function render(box, b) {
  const c = b.culprit;
  const dev = Math.round(b.device_seconds / 60), budget = Math.round(b.budget_seconds / 3600);
  box.replaceChildren(
    h('h3', {}, 'Bisection #' + b.id + ' ', badge(humanize(b.state), KIND[b.state] || 'scope')),
    h('p', { class: 'muted small' }, b.metric + ' of ' + b.config + ' on ' + b.device_model + ' (' + b.device_id + '), ' +
      b.builds.length + ' builds · device time ' + dev + ' min of ' + budget + ' h · ' + b.runs + ' runs'),
    c ? h('p', { class: 'culprit' }, 'Culprit: ', buildLink(c.first_bad), ' (', h('span', { class: 'mono' }, shortSHA(c.first_bad.git_sha) || 'no sha'),
      '), last good ', buildLink(c.last_good), ' (', h('span', { class: 'mono' }, shortSHA(c.last_good.git_sha) || 'no sha'), ') · ',
      h('span', { class: 'bad num' }, fmtPct(c.change)), ' · ', code(c.git_log)) : h('p', { class: 'reason' }, b.reason || 'running'),
    h('p', { class: 'bisect-builds small' }, b.builds.map((x) => h('span', { class: ['build-chip', x.state], title: x.skipped || x.state }, x.id))),
    stepsTable(b));
  if (b.state === 'running') {
    setTimeout(async () => {
      if (!box.isConnected) return;
      try { render(box, await api.getBisection(b.id)); } catch { /* keep the last view */ }
    }, 5000);
  }
}

// bisectPanel renders the group's bisection, or the button that starts
// one (POST /v1/alerts/{id}/bisect needs a token with the trigger scope).
export async function bisectPanel(g) {
  const box = h('section', { class: 'card bisect-panel', id: 'bisection' });
  if (g.bisection) {
    try {
      render(box, await api.getBisection(g.bisection.id));
    } catch (e) {
      box.replaceChildren(h('p', { class: 'bad' }, 'Could not load bisection #' + g.bisection.id + ': ' + e.message));
    }
    return box;
  }
  const msg = h('span', { class: 'muted', role: 'status' });
  const start = async () => {
    msg.textContent = 'starting…';
    try {
      render(box, await api.bisectAlert(g.id, {}));
    } catch (e) {
      msg.className = 'bad';
      msg.textContent = e.message;
    }
  };
  box.replaceChildren(h('h3', {}, 'Bisection'),
    h('p', { class: 'muted' }, 'Find the build that caused it: A/B runs between its last good and first bad build on the alerting device model. Or run ', code('lesfarm bisect ' + g.id + ' --wait'), '.'),
    h('button', { type: 'button', class: 'btn btn-primary', onclick: start }, 'Bisect'), ' ', msg);
  return box;
}
