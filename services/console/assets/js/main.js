// The console's shell: sign-in, who you are, the sections your roles open,
// and the hash router ("#/instances?status=FAILED", "#/instance/<id>").
import { h, replace, fmtSpan, fmtMillis, errorBox, href } from './dom.js';
import { session, verify, claimsOf, ApiError } from './api.js';
import { instancesView } from './instances.js';
import { instanceView } from './instance.js';
import { definitionsView, definitionView } from './definitions.js';
import { retentionView, usageView } from './tenant.js';
import { tenantsView, platformUsageView, janitorView } from './platform.js';
import { auditView, platformAuditView } from './audit.js';

const main = document.getElementById('main');
const nav = document.getElementById('nav');
const who = document.getElementById('who');

// Sections, in menu order; a section shows when the acting token has one of its roles.
const sections = [
  { route: 'instances', label: 'Instances', roles: ['client'], view: instancesView },
  { route: 'definitions', label: 'Definitions', roles: ['client', 'tenant-admin'], view: definitionsView },
  { route: 'retention', label: 'Retention', roles: ['tenant-admin'], view: retentionView },
  { route: 'usage', label: 'Usage & limits', roles: ['tenant-admin'], view: usageView },
  { route: 'audit', label: 'Deletion audit log', roles: ['tenant-admin'], view: auditView },
  { route: 'tenants', label: 'Tenants', roles: ['platform-admin'], view: tenantsView, group: 'Platform' },
  { route: 'platform-usage', label: 'Usage by tenant', roles: ['platform-admin'], view: platformUsageView, group: 'Platform' },
  { route: 'janitor', label: 'Janitor runs', roles: ['platform-admin'], view: janitorView, group: 'Platform' },
  { route: 'platform-audit', label: 'Deletion audit log', roles: ['platform-admin'], view: platformAuditView, group: 'Platform' },
];
// Pages reached from a section, with the roles that reach them.
const pages = {
  instance: { roles: ['client'], view: instanceView, section: 'instances' },
  definition: { roles: ['client', 'tenant-admin'], view: definitionView, section: 'definitions' },
};

let signInMessage = '';

function allowed(roles) {
  return roles.some((r) => session.can(r));
}

function parseHash() {
  const raw = location.hash.replace(/^#\/?/, '');
  const [path, query] = raw.split('?');
  const segs = path ? path.split('/').map((s) => decodeURIComponent(s)) : [];
  return { segs, params: new URLSearchParams(query || '') };
}

function renderWho() {
  const w = session.who();
  if (!w) {
    replace(who);
    return;
  }
  const left = w.expires ? (w.expires - Date.now()) / 1000 : Infinity;
  const ids = session.identities.map((t, i) => {
    let label = `token ${i + 1}`;
    try {
      const c = claimsOf(t);
      label = `${c.tenant || 'platform'} (${c.roles.join(', ')})`;
    } catch {
      // an unreadable token keeps its number
    }
    return h('option', { value: String(i), selected: i === session.active }, label);
  });
  replace(who,
    h('span', { class: 'who-tenant', title: w.subject ? `subject ${w.subject}` : null },
      w.tenant ? ['Tenant ', h('strong', { id: 'who-tenant' }, w.tenant)] : h('strong', { id: 'who-tenant' }, 'Platform')),
    h('span', { class: 'who-roles', id: 'who-roles' }, w.roles.join(', ') || 'no roles'),
    h('span', { class: left < 600 ? 'who-exp warn' : 'who-exp', title: w.expires ? fmtMillis(w.expires) : null },
      w.expires ? `expires in ${fmtSpan(left)}` : 'no expiry'),
    session.identities.length > 1
      ? h('label', { class: 'who-switch' }, h('span', { class: 'sr-only' }, 'Act as'),
        h('select', { id: 'who-switch', onchange: (e) => { session.use(Number(e.target.value)); location.hash = '#/'; render(); } }, ids))
      : null,
    h('a', { href: '#/signin', class: 'who-add' }, 'Add token'),
    h('button', { type: 'button', class: 'link', id: 'signout', onclick: () => { session.clear(); signInMessage = 'Signed out.'; location.hash = '#/signin'; render(); } }, 'Sign out'));
}

function renderNav(current) {
  const items = sections.filter((s) => allowed(s.roles));
  const list = h('ul');
  let group = '';
  for (const s of items) {
    if (s.group && s.group !== group) {
      group = s.group;
      list.append(h('li', { class: 'nav-group', 'aria-hidden': 'true' }, s.group));
    }
    list.append(h('li', null, h('a', { href: href(s.route), 'aria-current': s.route === current ? 'page' : null }, s.label)));
  }
  replace(nav, session.who() ? list : null);
}

function signInView(container) {
  const token = h('textarea', { id: 'token', rows: '5', spellcheck: 'false', autocomplete: 'off', required: true,
    placeholder: 'eyJhbGciOi…' });
  const out = h('div', { id: 'signin-result', 'aria-live': 'polite' });
  if (signInMessage) out.append(h('p', { class: 'notice' }, signInMessage));
  const submit = h('button', { type: 'submit', class: 'primary', id: 'signin-button' }, 'Sign in');
  const form = h('form', { class: 'signin', onsubmit: async (e) => {
    e.preventDefault();
    const t = token.value.trim();
    replace(out);
    submit.disabled = true;
    try {
      await verify(t);
      session.add([t]);
      signInMessage = '';
      location.hash = '#/';
      render();
    } catch (err) {
      out.append(signInError(err));
    } finally {
      submit.disabled = false;
    }
  } },
  h('label', { for: 'token' }, 'Token'),
  token,
  h('small', { class: 'hint' }, 'A bearer token (JWT) from `orchard token`, an identity provider, or the dev server (.orchard/dev/tokens/). It stays in this tab only and is sent to this server’s API, nowhere else.'),
  h('div', { class: 'actions' }, submit));
  replace(container, h('h1', null, 'Sign in'), form, out);
  token.focus();
}

function signInError(err) {
  if (err instanceof ApiError && err.code === 'unauthenticated') {
    return errorBox({ message: `The API refused this token: ${err.message}` }, 'Sign-in failed');
  }
  return errorBox(err, 'Sign-in failed');
}

// exchange trades a one-time sign-in code (from the dev server's link) for tokens.
async function exchange(code) {
  const res = await fetch('signin', {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ code }),
    credentials: 'omit',
    cache: 'no-store',
  });
  const data = await res.json().catch(() => ({}));
  if (!res.ok || !Array.isArray(data.tokens)) throw new Error(data.error || `the sign-in link did not work (HTTP ${res.status})`);
  session.add(data.tokens);
}

let renderSeq = 0;

async function render() {
  const seq = ++renderSeq;
  const { segs, params } = parseHash();
  renderWho();
  const container = h('div', { class: 'view' });
  replace(main, container);
  if (!session.who() || segs[0] === 'signin') {
    renderNav('');
    document.title = 'Sign in · Orchard';
    signInView(container);
    return;
  }
  let section = sections.find((s) => s.route === segs[0]);
  const page = pages[segs[0]];
  if (!section && !page) {
    section = sections.find((s) => allowed(s.roles));
    if (!section) {
      renderNav('');
      document.title = 'Orchard';
      replace(container, h('h1', null, 'Nothing to show for this token'),
        h('p', { id: 'no-sections' }, `This token’s roles (${session.who().roles.join(', ') || 'none'}) open no part of the console: a worker token runs activities through the API and manages nothing. Add a client, tenant-admin or platform-admin token.`));
      return;
    }
    history.replaceState(null, '', href(section.route));
  }
  const target = section || page;
  renderNav(section ? section.route : page.section);
  if (!allowed(target.roles)) {
    replace(container, h('h1', null, 'Not allowed'), h('p', null, `This page needs one of the roles ${target.roles.join(', ')}.`));
    return;
  }
  try {
    await target.view(container, { segs: segs.slice(1), params, rerender: () => seq === renderSeq && render() });
  } catch (err) {
    if (seq === renderSeq) container.append(errorBox(err));
  }
  if (seq === renderSeq && document.activeElement === document.body) {
    const heading = container.querySelector('h1');
    if (heading) document.title = `${heading.textContent} · Orchard`;
  }
}

async function start() {
  session.load();
  const m = /^#signin=([A-Za-z0-9_-]+)$/.exec(location.hash);
  if (m) {
    // The code leaves the address bar and the history before anything else.
    history.replaceState(null, '', location.pathname);
    try {
      await exchange(m[1]);
    } catch (err) {
      signInMessage = '';
      render();
      main.querySelector('#signin-result').append(errorBox(err, 'Sign-in link'));
      return;
    }
  }
  render();
}

window.addEventListener('hashchange', () => {
  render().then(() => main.focus({ preventScroll: true }));
});
window.addEventListener('orchard:signedout', (e) => {
  signInMessage = `Your token stopped working (${e.detail}); sign in again.`;
  location.hash = '#/signin';
});
setInterval(() => {
  const w = session.who();
  if (w && w.expires && w.expires <= Date.now()) {
    session.drop();
    signInMessage = 'Your token expired; sign in again.';
    location.hash = '#/signin';
    render();
  } else {
    renderWho();
  }
}, 30000);

start();
