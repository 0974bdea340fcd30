// lineage.js: the build lineage (branch: main, release-3) the dashboard
// shows. It lives in the URL (?lineage=release-3; ?lineage=* is every
// lineage) so a link opens the same selection; without one the page shows
// main when the data has it. The known lineages come from GET /v1/lineages
// (every lineage of runs, schedules, series and alert groups).

import * as api from './api.js';

export const ALL = '*';
const RE = /^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$/;
let cache = null, at = 0;

// valid reports whether l is a lineage name the API accepts.
export const valid = (l) => RE.test(l || '');

// known returns the lineages seen in the API, main first (cached 30 s; a
// failed look-up is not cached).
export async function known() {
  if (cache && Date.now() - at < 30000) return cache;
  const page = await api.listLineages();
  cache = sortLineages((page.items || []).map((x) => x.lineage).filter(Boolean));
  at = Date.now();
  return cache;
}

export function sortLineages(ls) {
  return ls.sort((a, b) => (b === 'main') - (a === 'main') || a.localeCompare(b, 'en', { numeric: true }));
}

// resolve reads the lineage of q: '' for every lineage, a name, or the
// default (main when known, the only one when there is one, else all).
export function resolve(q, list) {
  const v = q.get('lineage');
  if (v === ALL || v === '') return '';
  if (v !== null && valid(v)) return v;
  return list.includes('main') ? 'main' : list.length === 1 ? list[0] : '';
}

// param is the URL form of a resolved lineage.
export const param = (l) => l || ALL;

// text names a lineage for people.
export const text = (l) => (l ? 'lineage ' + l : 'all lineages');
