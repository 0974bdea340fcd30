// app.js: the dashboard shell: router, navigation, API token dialog.
//
// Routes are real paths (/, /alerts/7, /series, /runs, /runs/42, /builds,
// /builds/ci-4812, /ab/12, /devices)
// that the coordinator answers with this page; links are intercepted and
// rendered without a reload. The page talks only to the REST API (/v1).

import { h } from './dom.js';
import { getToken, setToken } from './api.js';
import * as lineage from './lineage.js';
import * as regressions from './regressions.js';
import * as series from './series.js';
import * as runs from './runs.js';
import * as devices from './devices.js';
import * as compare from './compare.js';
import * as builds from './builds.js';
import * as ab from './ab.js';

const main = document.getElementById('view');
let leaveHooks = [];
let generation = 0;

function leave() {
  for (const f of leaveHooks) { try { f(); } catch (e) { console.warn('dashboard: leave hook', e); } }
  leaveHooks = [];
}

function navigate(url, { replace = false } = {}) {
  if (replace) history.replaceState(null, '', url); else history.pushState(null, '', url);
  route();
}

// Routes: [path, nav tab, render, filtered by the lineage selector].
const routes = [
  [/^\/(?:regressions\/?)?$/, 'regressions', (root, q, ctx) => regressions.renderList(root, q, ctx), true],
  [/^\/alerts\/(\d+)\/?$/, 'regressions', (root, q, ctx, m) => regressions.renderDetail(root, m[1], ctx)],
  [/^\/series\/?$/, 'series', (root, q, ctx) => series.render(root, q, ctx), true],
  [/^\/runs\/?$/, 'runs', (root, q, ctx) => runs.renderList(root, q, ctx), true],
  [/^\/runs\/(\d+)\/?$/, 'runs', (root, q, ctx, m) => runs.renderDetail(root, m[1], ctx, q)],
  [/^\/builds\/?$/, 'builds', (root, q, ctx) => builds.renderList(root, q, ctx), true],
  [/^\/builds\/([^/]+)\/?$/, 'builds', (root, q, ctx, m) => builds.renderDetail(root, decodeURIComponent(m[1]), ctx)],
  [/^\/ab\/(\d+)\/?$/, 'builds', (root, q, ctx, m) => ab.render(root, m[1], ctx)],
  [/^\/devices\/?$/, 'devices', (root, q, ctx) => devices.render(root, q, ctx)],
  [/^\/compare\/?$/, 'compare', (root, q, ctx) => compare.render(root, q, ctx)],
];

async function route() {
  leave();
  const gen = ++generation;
  delete document.body.dataset.ready;
  // Old hash links (#/series?...) become paths.
  if (location.hash.startsWith('#/')) {
    const p = location.hash.slice(1).replace(/^\/alerts(?=\?|$)/, '/');
    history.replaceState(null, '', p);
  }
  const path = location.pathname;
  const q = new URLSearchParams(location.search);
  const root = h('div', { class: 'view' });
  main.replaceChildren(root);
  const ctx = {
    title: (t) => { if (gen === generation) document.title = t + ' · lesfarm'; },
    navigate,
    current: () => gen === generation,
    // replaceQuery records the effective filters in the URL without a render.
    replaceQuery: (obj) => {
      if (gen !== generation) return;
      const p = new URLSearchParams();
      for (const [k, v] of Object.entries(obj)) if (v !== null && v !== undefined) p.set(k, v);
      if (ctx.lineage !== undefined && !p.has('lineage')) p.set('lineage', lineage.param(ctx.lineage));
      history.replaceState(null, '', location.pathname + (p.toString() ? '?' + p : ''));
    },
    onLeave: (f) => { if (gen === generation) leaveHooks.push(f); else f(); },
    // every runs f periodically while this view is shown and the tab
    // visible, until f returns true.
    every: (ms, f) => {
      if (gen !== generation) return;
      let busy = false;
      const id = setInterval(async () => {
        if (busy || document.hidden || gen !== generation) return;
        busy = true;
        try { if ((await f()) === true) clearInterval(id); } catch (e) { console.warn('dashboard: refresh', e); } finally { busy = false; }
      }, ms);
      leaveHooks.push(() => clearInterval(id));
    },
  };
  let hit = null;
  for (const [re, nav, fn, lin] of routes) {
    const m = re.exec(path);
    if (m) { hit = [nav, fn, m, lin]; break; }
  }
  pick.hidden = !(hit && hit[3]);
  if (!pick.hidden) {
    // The lineage selector: its options are the lineages the API has seen
    // (plus the URL's); the effective one is written back into the URL.
    let list = [];
    try { list = await lineage.known(); } catch { /* the view reports the API error */ }
    if (gen !== generation) return;
    const cur = ctx.lineage = lineage.resolve(q, list);
    const p = lineage.param(cur);
    pickSel.replaceChildren(h('option', { value: lineage.ALL }, 'all lineages'),
      ...(cur && !list.includes(cur) ? [...list, cur] : list).map((l) => h('option', { value: l }, l)));
    pickSel.value = p;
    if (q.get('lineage') !== p) {
      q.set('lineage', p);
      history.replaceState(null, '', path + '?' + q);
    }
    for (const a of document.querySelectorAll('nav.tabs a')) if (a.dataset.nav !== 'devices' && a.dataset.nav !== 'compare') a.href = a.pathname + '?lineage=' + encodeURIComponent(p);
  }
  for (const a of document.querySelectorAll('nav.tabs a')) a.classList.toggle('active', hit !== null && a.dataset.nav === hit[0]);
  const cur = hit && document.querySelector(`nav.tabs a[data-nav="${hit[0]}"]`);
  document.getElementById('menu-label').textContent = cur ? cur.textContent : 'Views';
  if (!hit) {
    ctx.title('Not found');
    root.append(h('div', { class: 'empty' }, h('h3', {}, 'No page at ' + path), h('p', {}, h('a', { href: '/' }, 'Go to Regressions'))));
    document.body.dataset.ready = path;
    return;
  }
  main.setAttribute('aria-busy', 'true');
  try {
    await hit[1](root, q, ctx, hit[2]);
  } catch (e) {
    console.error(e);
    if (gen === generation) root.append(h('div', { class: 'error', role: 'alert' }, 'The dashboard failed to render this page: ' + e.message));
  } finally {
    if (gen === generation) {
      main.removeAttribute('aria-busy');
      scrollCues(root);
      document.body.dataset.ready = path;
    }
  }
}

// scrollCues wraps every data table of root that is not yet wrapped, so a
// table wider than the screen scrolls inside its box, and marks the
// wrapper while there is more to the right (a fading edge and a note).
function scrollCues(root) {
  for (const t of root.querySelectorAll('table.data')) {
    let sc = t.parentElement;
    if (!sc.classList.contains('table-scroll')) {
      sc = h('div', { class: 'table-scroll' });
      t.replaceWith(sc);
      sc.append(t);
    }
    if (sc.parentElement.classList.contains('table-wrap')) continue;
    const wrap = h('div', { class: 'table-wrap' }, h('p', { class: 'scroll-note', 'aria-hidden': 'true' }, 'scroll sideways for more →'));
    sc.replaceWith(wrap);
    wrap.append(sc, h('div', { class: 'scroll-cue' }));
    const mark = () => {
      wrap.classList.toggle('scrolls', sc.scrollWidth > sc.clientWidth + 1);
      wrap.classList.toggle('at-end', sc.scrollLeft + sc.clientWidth >= sc.scrollWidth - 2);
    };
    sc.addEventListener('scroll', mark, { passive: true });
    if (window.ResizeObserver) new ResizeObserver(mark).observe(sc);
    mark();
  }
}

// Tables a view adds later (a refresh, an expanded card) get their cues too.
let cueFrame = 0;
new MutationObserver(() => {
  if (!cueFrame) cueFrame = requestAnimationFrame(() => { cueFrame = 0; scrollCues(main); });
}).observe(main, { childList: true, subtree: true });

// The views menu (narrow screens): the button names the current view and
// opens the list; choosing a view, Escape or a click elsewhere closes it.
const header = document.querySelector('header.top'), menuBtn = document.getElementById('menu-button');
function setMenu(open) {
  header.classList.toggle('menu-open', open);
  menuBtn.setAttribute('aria-expanded', String(open));
}
menuBtn.addEventListener('click', () => setMenu(!header.classList.contains('menu-open')));
document.addEventListener('keydown', (ev) => { if (ev.key === 'Escape') setMenu(false); });
document.addEventListener('click', (ev) => { if (!header.contains(ev.target) || ev.target.closest('nav.tabs a')) setMenu(false); });

const pick = document.getElementById('lineage-pick'), pickSel = document.getElementById('lineage-select');
pickSel.addEventListener('change', () => {
  const q = new URLSearchParams(location.search);
  q.set('lineage', pickSel.value);
  navigate(location.pathname + '?' + q);
});

// Links to dashboard paths render in place; API links and new-tab clicks
// behave normally.
document.addEventListener('click', (ev) => {
  if (ev.defaultPrevented || ev.button !== 0 || ev.metaKey || ev.ctrlKey || ev.shiftKey || ev.altKey) return;
  const a = ev.target.closest('a[href]');
  if (!a || a.target || a.origin !== location.origin) return;
  const p = a.pathname;
  if (p.startsWith('/v1') || p.startsWith('/docs') || p.startsWith('/openapi') || p.startsWith('/ui/')) return;
  ev.preventDefault();
  if (a.pathname + a.search !== location.pathname + location.search) navigate(a.pathname + a.search);
});
window.addEventListener('popstate', route);

// Token dialog: the token is kept in this browser's localStorage and sent
// as "Authorization: Bearer" with every API request.
const dialog = document.getElementById('token-dialog');
const tokenBtn = document.getElementById('token-button');
function showTokenState() {
  const has = !!getToken();
  tokenBtn.textContent = has ? 'API token ✓' : 'API token';
  tokenBtn.title = has ? 'An API token is stored in this browser; triage sends it.' : 'Paste an API token to triage alerts.';
  tokenBtn.classList.toggle('has-token', has);
}
function openToken() {
  const input = dialog.querySelector('input');
  input.value = '';
  input.placeholder = getToken() ? 'a token is stored; paste a new one to replace it' : 'paste the token printed by lesfarm token create';
  if (typeof dialog.showModal === 'function') dialog.showModal(); else dialog.setAttribute('open', '');
  input.focus();
}
tokenBtn.addEventListener('click', openToken);
document.addEventListener('lesfarm-ask-token', openToken);
dialog.querySelector('form').addEventListener('submit', (ev) => {
  ev.preventDefault();
  const v = dialog.querySelector('input').value.trim();
  const action = ev.submitter ? ev.submitter.value : 'save';
  if (action === 'forget') setToken('');
  else if (action === 'save' && v) setToken(v);
  dialog.close ? dialog.close() : dialog.removeAttribute('open');
});
window.addEventListener('lesfarm-token', showTokenState);
showTokenState();

route();
