// DOM building and formatting. Every string is inserted as text: h() appends
// strings as Text nodes and sets attributes with setAttribute, so nothing a
// tenant controls is ever parsed as HTML. Nothing here uses innerHTML.

// h creates an element. props: attributes, "class", "on<event>" listeners,
// and "dataset"/"value"/"checked"/"disabled"/"selected" as properties.
export function h(tag, props, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(props || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith('on') && typeof v === 'function') {
      el.addEventListener(k.slice(2), v);
    } else if (k === 'class') {
      el.className = v;
    } else if (k === 'dataset') {
      Object.assign(el.dataset, v);
    } else if (k === 'value' || k === 'checked' || k === 'disabled' || k === 'selected' || k === 'open') {
      el[k] = v;
    } else if (k === 'style') {
      throw new Error('inline styles are not allowed (CSP): use a class');
    } else {
      el.setAttribute(k, v === true ? '' : String(v));
    }
  }
  append(el, children);
  return el;
}

// append adds children (nodes, strings, numbers, nested arrays) as nodes or text.
export function append(el, children) {
  for (const c of [children].flat(Infinity)) {
    if (c === undefined || c === null || c === false) continue;
    el.append(c instanceof Node ? c : String(c));
  }
  return el;
}

// replace empties el and fills it with children.
export function replace(el, ...children) {
  el.replaceChildren();
  return append(el, children);
}

const pad = (n, w = 2) => String(n).padStart(w, '0');

// fmtTime renders an RFC 3339 timestamp in local time, to the second.
export function fmtTime(ts) {
  if (!ts) return '—';
  const d = new Date(ts);
  if (Number.isNaN(d.getTime())) return String(ts);
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
}

// fmtMillis renders milliseconds since the epoch like fmtTime.
export function fmtMillis(ms) {
  return ms ? fmtTime(new Date(Number(ms)).toISOString()) : '—';
}

// timeEl is a <time> with the local time and the exact instant on hover.
export function timeEl(ts) {
  if (!ts) return h('span', { class: 'muted' }, '—');
  return h('time', { datetime: ts, title: ts }, fmtTime(ts));
}

// fmtSpan renders a number of seconds as "3d 4h", "12m 5s"...
export function fmtSpan(seconds) {
  let s = Math.round(Math.abs(seconds));
  const parts = [];
  for (const [unit, n] of [['d', 86400], ['h', 3600], ['m', 60], ['s', 1]]) {
    if (s >= n || (unit === 's' && parts.length === 0)) {
      parts.push(`${Math.floor(s / n)}${unit}`);
      s %= n;
    }
    if (parts.length === 2) break;
  }
  return parts.join(' ');
}

const durationUnits = { d: 86400, h: 3600, m: 60, s: 1 };

// parseDuration reads "30d", "12h", "90m", "45s", "1d 12h" or a bare number
// of seconds into a protobuf JSON duration ("2592000s"). Empty: null (unset).
export function parseDuration(text) {
  const t = String(text).trim();
  if (t === '') return null;
  if (/^\d+$/.test(t)) return `${t}s`;
  let total = 0;
  const re = /(\d+)\s*([dhms])\s*/gy;
  let m;
  let end = 0;
  while ((m = re.exec(t)) !== null) {
    total += Number(m[1]) * durationUnits[m[2]];
    end = re.lastIndex;
  }
  if (end !== t.length) throw new Error(`"${t}" is not a duration: write it like 30d, 12h, 90m or 1d 12h`);
  return `${total}s`;
}

// fmtDuration renders a protobuf JSON duration ("3600s") as "1h".
export function fmtDuration(d) {
  if (d === undefined || d === null || d === '') return '';
  const secs = Number(String(d).replace(/s$/, ''));
  if (!Number.isFinite(secs)) return String(d);
  if (secs === 0) return '0s';
  const parts = [];
  let s = secs;
  for (const [unit, n] of Object.entries(durationUnits)) {
    if (s >= n) {
      parts.push(`${Math.floor(s / n)}${unit}`);
      s %= n;
    }
  }
  return parts.join(' ');
}

// num renders an int64 (a JSON string in proto3 JSON) with separators.
export function num(v) {
  const n = Number(v || 0);
  return n.toLocaleString('en-US');
}

const utf8 = new TextDecoder('utf-8');

// bytesText decodes a protobuf JSON bytes field (base64) as UTF-8 text.
export function bytesText(b64) {
  if (!b64) return '';
  const bin = atob(b64);
  const buf = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) buf[i] = bin.charCodeAt(i);
  return utf8.decode(buf);
}

// textBytes encodes text as a protobuf JSON bytes field (base64 of UTF-8).
export function textBytes(text) {
  const buf = new TextEncoder().encode(text);
  let bin = '';
  for (const b of buf) bin += String.fromCharCode(b);
  return btoa(bin);
}

// pretty indents a JSON text; other text is returned as it is.
export function pretty(text) {
  if (text === '') return '';
  try {
    return JSON.stringify(JSON.parse(text), null, 2);
  } catch {
    return text;
  }
}

// jsonBlock shows a JSON document (or any text) as preformatted text.
export function jsonBlock(text, label) {
  if (text === '' || text === undefined || text === null) return h('p', { class: 'muted' }, 'none');
  return h('pre', { class: 'json', tabindex: '0', 'aria-label': label || 'JSON' }, pretty(text));
}

// ID_PATTERN is the API's pattern of ids and names, for pattern attributes
// (compiled with the v flag, hence the escapes).
export const ID_PATTERN = '[A-Za-z0-9._:@\\/\\-]+';

export const STATUSES = ['RUNNING', 'COMPLETED', 'FAILED', 'CANCELLED', 'CONTINUED_AS_NEW'];
export const TERMINAL = ['COMPLETED', 'FAILED', 'CANCELLED'];

// statusName turns "INSTANCE_STATUS_RUNNING" into "RUNNING".
export function statusName(s) {
  return String(s || '').replace(/^INSTANCE_STATUS_/, '');
}

export function statusLabel(s) {
  const n = statusName(s).replace(/_/g, ' ').toLowerCase();
  return n.charAt(0).toUpperCase() + n.slice(1);
}

export function statusBadge(s) {
  const n = statusName(s);
  return h('span', { class: `badge st-${n.toLowerCase()}` }, statusLabel(n));
}

// link is an in-console link: route segments are URL-encoded.
export function link(label, route, params, props) {
  return h('a', { href: href(route, params), ...(props || {}) }, label);
}

// href builds "#/seg/seg?k=v" from ['seg', 'seg'] (or a string) and params.
export function href(route, params) {
  const segs = Array.isArray(route) ? route : [route];
  let out = '#/' + segs.map((s) => encodeURIComponent(s)).join('/');
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params || {})) {
    if (Array.isArray(v)) v.forEach((x) => q.append(k, x));
    else if (v !== undefined && v !== null && v !== '' && v !== false) q.set(k, v === true ? '1' : v);
  }
  const qs = q.toString();
  return qs ? `${out}?${qs}` : out;
}

// errorBox shows an error for people: what failed, in the API's words.
export function errorBox(err, what) {
  const box = h('div', { class: 'error', role: 'alert' });
  append(box, [what ? h('strong', null, what + ': ') : null, err && err.message ? err.message : String(err)]);
  const violations = (err && err.violations) || [];
  if (violations.length) {
    box.append(h('ul', { class: 'violations' }, violations.map((v) => h('li', null, h('code', null, v.field), ' ', v.description))));
  }
  return box;
}

// notice is a transient success message.
export function notice(msg) {
  return h('div', { class: 'notice', role: 'status' }, msg);
}

const FLASH_KEY = 'orchard.console.flash';

// flashNext keeps a message for the next page shown (after an action that
// navigates or re-renders).
export function flashNext(msg) {
  sessionStorage.setItem(FLASH_KEY, msg);
}

// takeFlash returns the kept message as a notice (null when none), once.
export function takeFlash() {
  const msg = sessionStorage.getItem(FLASH_KEY);
  sessionStorage.removeItem(FLASH_KEY);
  return msg ? notice(msg) : null;
}

// dialog shows a modal <dialog> built by body(close) and resolves with what
// close was called with (undefined on Escape). The dialog's own buttons
// decide; focus starts on the first control that is not destructive.
export function dialog(title, build) {
  return new Promise((resolve) => {
    let result;
    const dlg = h('dialog', { class: 'dlg', 'aria-label': title });
    const close = (v) => {
      result = v;
      dlg.close();
    };
    dlg.append(h('h2', null, title), ...[build(close)].flat(Infinity));
    dlg.addEventListener('close', () => {
      dlg.remove();
      resolve(result);
    });
    document.body.append(dlg);
    dlg.showModal();
    const first = dlg.querySelector('input, textarea, select, button:not(.danger)');
    if (first) first.focus();
  });
}

// confirm asks for a yes/no on a destructive action; body says exactly
// what will happen.
export function confirm(title, body, action, { danger = true } = {}) {
  return dialog(title, (close) => [
    h('div', { class: 'dlg-body' }, body),
    h('div', { class: 'actions' },
      h('button', { type: 'button', onclick: () => close(false) }, 'Cancel'),
      h('button', { type: 'button', class: danger ? 'danger' : 'primary', onclick: () => close(true) }, action)),
  ]).then((v) => v === true);
}

// field is a labelled form control.
export function field(label, control, hint) {
  const id = control.id || `f-${Math.random().toString(36).slice(2, 9)}`;
  control.id = id;
  return h('div', { class: 'field' },
    h('label', { for: id }, label),
    control,
    hint ? h('small', { class: 'hint' }, hint) : null);
}

// table renders rows with a header; cols: [{title, cell(row) -> node|string, class}].
export function table(cols, rows, { empty = 'Nothing here.', caption } = {}) {
  if (!rows.length) return h('p', { class: 'muted empty' }, empty);
  return h('table', { class: 'grid' },
    caption ? h('caption', null, caption) : null,
    h('thead', null, h('tr', null, cols.map((c) => h('th', { scope: 'col', class: c.class }, c.title)))),
    h('tbody', null, rows.map((r) => h('tr', null, cols.map((c) => h('td', { class: c.class }, c.cell(r)))))));
}

// busy disables a button while fn runs.
export async function busy(button, fn) {
  button.disabled = true;
  button.setAttribute('aria-busy', 'true');
  try {
    return await fn();
  } finally {
    button.disabled = false;
    button.removeAttribute('aria-busy');
  }
}
