// The public API over the Connect protocol's JSON form, and the signed-in
// identities. Tokens live in sessionStorage (this tab only, gone when it
// closes), never in localStorage, a cookie or a URL.

const STORE_KEY = 'orchard.console.session';

// ApiError is a Connect error: code ("not_found", "unauthenticated"...),
// message, and the field violations of a google.rpc.BadRequest detail.
export class ApiError extends Error {
  constructor(code, message, details) {
    super(message || code);
    this.code = code;
    this.details = details || [];
    this.violations = [];
    this.reason = '';
    for (const d of this.details) {
      if (d.type === 'google.rpc.BadRequest' && d.debug) this.violations.push(...(d.debug.fieldViolations || []));
      if (d.type === 'google.rpc.ErrorInfo' && d.debug) this.reason = d.debug.reason || '';
    }
  }
}

// call sends one unary Connect request with the token. The API lives at
// the root of the origin the console is served under.
export async function call(token, service, method, body) {
  const url = new URL(`../orchard.v1.${service}/${method}`, document.baseURI);
  let res;
  try {
    res = await fetch(url, {
      method: 'POST',
      headers: {
        'Content-Type': 'application/json',
        'Connect-Protocol-Version': '1',
        Authorization: `Bearer ${token}`,
      },
      body: JSON.stringify(body || {}),
      credentials: 'omit',
      cache: 'no-store',
    });
  } catch (e) {
    throw new ApiError('unavailable', `The API could not be reached (${e.message}).`);
  }
  const text = await res.text();
  let data = {};
  if (text) {
    try {
      data = JSON.parse(text);
    } catch {
      throw new ApiError('unknown', `The API answered ${res.status} with something that is not JSON.`);
    }
  }
  if (!res.ok) throw new ApiError(data.code || `http_${res.status}`, data.message || `HTTP ${res.status}`, data.details);
  return data;
}

// claimsOf reads a JWT's claims for display. The server verifies tokens;
// the console only reads what a token says about itself.
export function claimsOf(token) {
  const parts = String(token).split('.');
  if (parts.length !== 3) throw new Error('This is not a token: a token has three parts separated by dots.');
  let json;
  try {
    json = atob(parts[1].replace(/-/g, '+').replace(/_/g, '/').padEnd(Math.ceil(parts[1].length / 4) * 4, '='));
  } catch {
    throw new Error('This is not a token: its middle part is not base64url.');
  }
  const c = JSON.parse(json);
  return {
    tenant: typeof c.tenant === 'string' ? c.tenant : '',
    roles: Array.isArray(c.roles) ? c.roles.filter((r) => typeof r === 'string') : [],
    subject: typeof c.sub === 'string' ? c.sub : '',
    expires: typeof c.exp === 'number' ? c.exp * 1000 : 0,
  };
}

// session is the tab's identities and which one acts.
export const session = {
  identities: [],
  active: 0,

  load() {
    try {
      const s = JSON.parse(sessionStorage.getItem(STORE_KEY) || 'null');
      if (s && Array.isArray(s.identities)) {
        this.identities = s.identities.filter((t) => typeof t === 'string');
        this.active = Math.min(Number(s.active) || 0, Math.max(this.identities.length - 1, 0));
      }
    } catch {
      this.identities = [];
    }
  },
  save() {
    sessionStorage.setItem(STORE_KEY, JSON.stringify({ identities: this.identities, active: this.active }));
  },
  token() {
    return this.identities[this.active] || '';
  },
  who() {
    const t = this.token();
    return t ? claimsOf(t) : null;
  },
  // add puts tokens first-come (no duplicates) and makes the first one act.
  add(tokens) {
    const fresh = tokens.filter((t) => !this.identities.includes(t));
    this.identities = [...fresh, ...this.identities].slice(0, 8);
    this.active = this.identities.indexOf(tokens[0]);
    this.save();
  },
  use(i) {
    this.active = i;
    this.save();
  },
  // drop removes the acting identity (signed out, or refused by the API).
  drop() {
    this.identities.splice(this.active, 1);
    this.active = 0;
    this.save();
  },
  clear() {
    this.identities = [];
    this.active = 0;
    sessionStorage.removeItem(STORE_KEY);
  },
  can(role) {
    const w = this.who();
    return !!w && w.roles.includes(role);
  },
};

// rpc calls with the acting identity's token. An unauthenticated answer
// means the token no longer works (expired, revoked key): the console
// drops it and goes back to sign-in with the API's reason.
export async function rpc(service, method, body) {
  try {
    return await call(session.token(), service, method, body);
  } catch (e) {
    if (e instanceof ApiError && e.code === 'unauthenticated') {
      session.drop();
      window.dispatchEvent(new CustomEvent('orchard:signedout', { detail: e.message }));
    }
    throw e;
  }
}

// verify asks the API whether it accepts a token, with a read its roles
// allow. PERMISSION_DENIED still proves the token is genuine.
export async function verify(token) {
  const c = claimsOf(token);
  if (c.expires && c.expires <= Date.now()) {
    throw new ApiError('unauthenticated', `This token expired on ${new Date(c.expires).toLocaleString()}.`);
  }
  let probe = ['ClientService', 'ListInstances', { pageSize: 1 }];
  if (c.roles.includes('platform-admin')) probe = ['AdminService', 'ListTenants', { pageSize: 1 }];
  else if (c.roles.includes('tenant-admin')) probe = ['TenantService', 'GetLimits', {}];
  try {
    await call(token, ...probe);
  } catch (e) {
    if (!(e instanceof ApiError) || e.code !== 'permission_denied') throw e;
  }
  return c;
}
