// api.js: the only code that talks to the coordinator, and only to its
// REST API under /v1. Errors are RFC 9457 problem+json documents; they
// become ApiError values with the field locations in the message.

const TOKEN_KEY = 'lesfarm.token';

export function getToken() {
  try { return localStorage.getItem(TOKEN_KEY) || ''; } catch { return ''; }
}

export function setToken(t) {
  try {
    if (t) localStorage.setItem(TOKEN_KEY, t.trim()); else localStorage.removeItem(TOKEN_KEY);
  } catch { /* storage disabled: the token lives for this page only */ }
  window.dispatchEvent(new Event('lesfarm-token'));
}

export class ApiError extends Error {
  constructor(status, message, problem) {
    super(message);
    this.status = status;
    this.problem = problem || null;
  }
}

function url(path, params) {
  const u = new URL(path, location.origin);
  for (const [k, v] of Object.entries(params || {})) {
    if (v === undefined || v === null || v === '') continue;
    if (Array.isArray(v)) for (const x of v) u.searchParams.append(k, x);
    else u.searchParams.set(k, v);
  }
  return u;
}

async function request(method, path, params, body) {
  if (!path.startsWith('/v1/')) throw new Error('dashboard: only /v1 API paths are allowed: ' + path);
  const headers = { Accept: 'application/json' };
  const tok = getToken();
  if (tok) headers.Authorization = 'Bearer ' + tok;
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  let resp;
  try {
    resp = await fetch(url(path, params), { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  } catch (e) {
    throw new ApiError(0, 'the coordinator did not answer (' + e.message + ')');
  }
  if (resp.ok) return resp.status === 204 ? null : resp.json();
  let msg = resp.status + ' ' + resp.statusText, problem = null;
  try {
    problem = await resp.json();
    msg = (problem.title || msg) + (problem.detail ? ': ' + problem.detail : '');
    for (const e of problem.errors || []) msg += '; ' + (e.location ? e.location + ': ' : '') + e.message;
  } catch { /* not JSON */ }
  throw new ApiError(resp.status, msg, problem);
}

export const get = (path, params) => request('GET', path, params);
export const patch = (path, body) => request('PATCH', path, undefined, body);
export const post = (path, body) => request('POST', path, undefined, body);

// The endpoints the dashboard uses (see /openapi.json).
export const listAlerts = (p) => get('/v1/alerts', p);
export const getAlert = (id) => get('/v1/alerts/' + encodeURIComponent(id));
export const triageAlert = (id, body) => patch('/v1/alerts/' + encodeURIComponent(id), body);
export const bisectAlert = (id, body) => post('/v1/alerts/' + encodeURIComponent(id) + '/bisect', body);
export const getBisection = (id) => get('/v1/bisections/' + encodeURIComponent(id));
export const getAB = (id) => get('/v1/ab/' + encodeURIComponent(id));
export const listAB = (p) => get('/v1/ab', p);
export const seriesCatalog = (p) => get('/v1/series/catalog', p);
export const listLineages = () => get('/v1/lineages');
export const querySeries = (p) => get('/v1/series', p);
export const listRuns = (p) => get('/v1/runs', p);
export const getRun = (id) => get('/v1/runs/' + encodeURIComponent(id));
export const listDevices = (p) => get('/v1/devices', p);
export const runTimeline = (id, cfg, p) => get('/v1/runs/' + encodeURIComponent(id) + '/configs/' + encodeURIComponent(cfg) + '/timeline', p);
export const runLayers = (id, cfg) => get('/v1/runs/' + encodeURIComponent(id) + '/configs/' + encodeURIComponent(cfg) + '/layers');
export const runExperts = (id, cfg, p) => get('/v1/runs/' + encodeURIComponent(id) + '/configs/' + encodeURIComponent(cfg) + '/experts', p);
export const runDeviceTrace = (id, p) => get('/v1/runs/' + encodeURIComponent(id) + '/device-trace', p);
export const listResults = (p) => get('/v1/results', p);
export const listBuilds = (p) => get('/v1/builds', p);
export const getBuild = (id) => get('/v1/builds/' + encodeURIComponent(id));
