// devices.js: the fleet.

import * as api from './api.js';
import { h, code, empty, errorBox, badge } from './dom.js';
import { fmtAgo, fmtTime, fmtBytes } from './format.js';

function labels(d) {
  const all = { ...(d.agent_labels || {}), ...(d.labels || {}) };
  const keys = Object.keys(all).sort();
  if (!keys.length) return h('span', { class: 'muted' }, '—');
  return keys.map((k) => h('span', { class: 'chip', title: d.labels && k in d.labels ? 'set by an operator' : 'reported by the agent' }, k + '=' + all[k]));
}

function hardware(d) {
  const fp = d.fingerprint || {};
  const parts = [];
  if (fp.soc) parts.push(fp.soc);
  else if (fp.cpu) parts.push(fp.cpu);
  if (fp.cores) parts.push(fp.cores + ' cores');
  const ram = d.ram_bytes ?? fp.ram_bytes;
  if (ram) parts.push(fmtBytes(ram) + ' RAM');
  return parts.length ? parts.join(' · ') : '—';
}

// build says which code the agent runs: its own build (and the runtime's,
// when it differs), the embedded runtime's build id (linked to its page)
// and the platform of the build executables it can run as a child, then
// when that build started (changed …, was the previous build).
function build(d) {
  const fp = d.fingerprint || {};
  const rt = fp.runtime_build && fp.runtime_build !== fp.agent_build ? fp.runtime_build : '';
  const parts = [
    fp.agent_build ? h('div', { class: 'mono small agent-build', title: 'agent build' + (rt ? '; runtime build ' + rt : ' (the runtime is embedded: same build)') }, fp.agent_build, rt ? ' · runtime ' + rt : '') : null,
    fp.embedded_build ? h('div', { class: 'small embedded-build' }, 'embeds ', h('a', { class: 'mono', href: '/builds/' + encodeURIComponent(fp.embedded_build), title: fp.embedded_sha256 ? 'sha256 ' + fp.embedded_sha256 : '' }, fp.embedded_build)) : null,
    h('div', { class: 'muted small exec-platform', title: 'platform of the build executables it runs as a child' }, fp.exec_platform ? 'runs ' + fp.exec_platform + ' builds' : 'runs its embedded build only'),
    // When the build last changed (the first hello with it) and from what.
    d.build_since ? h('div', { class: 'muted small build-since', title: fmtTime(d.build_since) + (d.previous_build ? '; before: ' + d.previous_build : '') },
      (d.previous_build ? 'changed ' : 'since ') + fmtAgo(d.build_since), d.previous_build ? ', was ' + d.previous_build : '') : null,
  ];
  return fp.agent_build || fp.embedded_build ? parts : h('span', { class: 'muted' }, '—');
}

// render is the Devices view.
export async function render(root, q, ctx) {
  ctx.title('Devices');
  const state = q.get('state') || '', emulated = q.get('emulated') || '';
  const sel = (name, label, opts, cur) => h('label', {}, label, h('select', { name }, opts.map(([v, t]) => h('option', { value: v, selected: v === cur }, t))));
  const form = h('form', { class: 'filters', onsubmit: (ev) => ev.preventDefault() },
    sel('state', 'state', [['', 'any'], ['online', 'online'], ['lost', 'lost']], state),
    sel('emulated', 'kind', [['', 'any'], ['false', 'real devices'], ['true', 'emulated']], emulated));
  for (const el of form.querySelectorAll('select')) el.addEventListener('change', () => {
    const p = new URLSearchParams();
    for (const e of form.elements) if (e.name && e.value) p.set(e.name, e.value);
    ctx.navigate('/devices' + (p.toString() ? '?' + p : ''));
  });
  const out = h('div', {});
  root.replaceChildren(h('div', { class: 'view-head' }, h('h2', {}, 'Devices'),
    h('p', { class: 'lede' }, 'Phones and host agents registered with the farm. Emulated agents reproduce a phone’s flash and RAM with a storage profile; their results never mix with real devices’ series. Refreshes every 10 s.')),
  form, out);
  const load = async () => {
    let items = [];
    try {
      let cursor;
      for (let i = 0; i < 10; i++) {
        const page = await api.listDevices({ state, emulated, limit: 1000, cursor });
        items = items.concat(page.items || []);
        if (!page.next_cursor) break;
        cursor = page.next_cursor;
      }
    } catch (e) {
      out.replaceChildren(errorBox(e, 'devices'));
      return;
    }
    if (!items.length) {
      out.replaceChildren(state || emulated
        ? empty('No devices match these filters.', h('p', {}, h('a', { href: '/devices' }, 'Show all devices')))
        : empty('No devices registered.', h('p', {}, 'Start an agent on a host with an emulated phone profile, e.g. ', code('lesfarm agent --nats-url nats://COORDINATOR:4222'),
          ', or install the phone app; or try everything locally with ', code('lesfarm demo'), '.')));
      return;
    }
    const online = items.filter((d) => d.state === 'online').length;
    out.replaceChildren(h('p', { class: 'muted summary-line' }, `${items.length} device${items.length === 1 ? '' : 's'}: ${online} online, ${items.length - online} lost; ` +
      `${items.filter((d) => d.emulated).length} emulated, ${items.filter((d) => d.drained).length} drained.`),
    h('table', { class: 'data devices-table' },
      h('thead', {}, h('tr', {}, h('th', {}, 'Device'), h('th', {}, 'Platform / OS'), h('th', {}, 'Kind'), h('th', {}, 'State'),
        h('th', {}, 'Hardware'), h('th', {}, 'Build'), h('th', {}, 'Labels'), h('th', {}, 'Runs'), h('th', {}, 'Last seen'))),
      h('tbody', {}, items.map((d) => h('tr', { 'data-device-id': d.id, 'data-state': d.state },
        h('td', {}, h('strong', {}, d.device_model || '(unknown model)'), h('div', { class: 'muted small mono' }, d.id)),
        h('td', {}, (d.platform || '—') + (d.os_version ? ' ' + d.os_version : '')),
        h('td', {}, d.emulated ? badge('emulated', 'emulated', d.profile ? 'storage profile ' + d.profile : 'emulated device') : badge('real', 'real'),
          d.emulated && d.profile ? h('span', { class: 'muted small' }, ' ' + d.profile) : null),
        h('td', {}, badge(d.state, 'dev-' + d.state), d.drained ? [' ', badge('drained', 'warn', 'takes no new runs')] : null),
        h('td', { class: 'small' }, hardware(d)),
        h('td', { class: 'build' }, build(d)),
        h('td', { class: 'labels' }, labels(d)),
        h('td', {}, d.active_run_id ? h('a', { href: '/runs/' + d.active_run_id }, '#' + d.active_run_id) : h('span', { class: 'muted' }, 'idle'),
          ' · ', h('a', { href: '/runs?device_id=' + encodeURIComponent(d.id) + '&lineage=*', class: 'small' }, 'history')),
        h('td', { title: fmtTime(d.last_seen_at), class: d.state === 'lost' ? 'bad' : '' }, fmtAgo(d.last_seen_at)))))));
  };
  await load();
  ctx.every(10000, async () => { await load(); });
}
