// dom.js: tiny element builders. Every value becomes a text node or an
// attribute, never HTML, so data from the API cannot inject markup.

const SVGNS = 'http://www.w3.org/2000/svg';

function build(node, props, children) {
  for (const [k, v] of Object.entries(props || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k === 'class') node.setAttribute('class', Array.isArray(v) ? v.filter(Boolean).join(' ') : v);
    else if (k.startsWith('on') && typeof v === 'function') node.addEventListener(k.slice(2), v);
    else if (k === 'value' && 'value' in node) node.value = v;
    else node.setAttribute(k, v === true ? '' : String(v));
  }
  append(node, children);
  return node;
}

function append(node, children) {
  for (const c of children) {
    if (c === null || c === undefined || c === false) continue;
    if (Array.isArray(c)) append(node, c);
    else node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
}

// h builds an HTML element: h('a', {href: '/runs', class: 'x'}, 'text', child).
export function h(tag, props, ...children) {
  return build(document.createElement(tag), props, children);
}

// s builds an SVG element.
export function s(tag, props, ...children) {
  return build(document.createElementNS(SVGNS, tag), props, children);
}

// code renders a command the user can copy.
export function code(text) {
  return h('code', { class: 'cmd' }, text);
}

// empty renders an explanation for a view with nothing to show.
export function empty(title, ...body) {
  return h('div', { class: 'empty', role: 'status' }, h('h3', {}, title), ...body.map((b) => (typeof b === 'string' ? h('p', {}, b) : b)));
}

// errorBox renders a failed API call.
export function errorBox(err, what) {
  const hint = err && err.status === 401
    ? h('p', {}, 'This coordinator needs an API token: use “API token” at the top right (create one with ', code('lesfarm token create --name NAME'), ').')
    : null;
  return h('div', { class: 'error', role: 'alert' },
    h('strong', {}, 'Could not load ' + what + '. '), String((err && err.message) || err), hint);
}

// badge renders a small labelled pill; kind adds its classes (colour).
export function badge(text, kind, title) {
  return h('span', { class: ['badge', ...String(kind || '').split(' ')], title }, text);
}
