// The deletion audit log: every delete and prune, by the API, the janitor
// or an erasure, newest first. Tenant admins see their tenant's; platform
// admins every tenant's, or one's.
import { h, replace, field, table, href, timeEl, num, errorBox, jsonBlock, dialog } from './dom.js';
import { rpc } from './api.js';

const ACTIONS = ['delete_instance', 'delete_instances', 'prune_executions', 'prune_executions_bulk', 'retention', 'graceful_delete', 'erase_tenant'];

function toISO(v) {
  if (!v) return undefined;
  const d = new Date(v);
  if (Number.isNaN(d.getTime())) throw new Error(`"${v}" is not a date and time`);
  return d.toISOString();
}

function outcome(r) {
  if (r.error) return h('span', { class: 'badge st-failed', title: r.error }, 'failed');
  if (!r.finishedAt) return h('span', { class: 'badge st-running' }, 'unfinished');
  return r.complete ? h('span', { class: 'badge st-completed' }, 'complete') : h('span', { class: 'badge st-cancelled' }, 'more left');
}

function showRequest(r) {
  dialog(`Request of ${r.action}`, (close) => [
    jsonBlock(r.requestJson || '', 'Request'),
    r.error ? h('pre', { class: 'json err' }, r.error) : null,
    h('div', { class: 'actions' }, h('button', { type: 'button', onclick: () => close() }, 'Close')),
  ]);
}

function recordsTable(rows, withTenant) {
  return table([
    { title: 'Started', cell: (r) => timeEl(r.startedAt) },
    withTenant ? { title: 'Tenant', cell: (r) => h('span', { class: 'mono' }, r.tenantId) } : null,
    { title: 'Action', cell: (r) => h('code', null, r.action) },
    { title: 'By', cell: (r) => [h('span', { class: 'mono' }, r.actor), r.role ? h('span', { class: 'muted' }, ` (${r.role})`) : ''] },
    { title: 'Instances', class: 'n', cell: (r) => num(r.instances) },
    { title: 'Executions', class: 'n', cell: (r) => num(r.executions) },
    { title: 'Events', class: 'n', cell: (r) => num(r.events) },
    { title: 'Outcome', cell: outcome },
    { title: 'Finished', cell: (r) => timeEl(r.finishedAt) },
    { title: 'Request', cell: (r) => h('button', { type: 'button', class: 'link', onclick: () => showRequest(r) }, 'show') },
  ].filter(Boolean), rows, { empty: 'Nothing deleted yet.' });
}

// auditPage renders the filter form and the paged records of one listing.
async function auditPage(container, params, { title, route, withTenant, load }) {
  const action = params.get('action') || '';
  const after = params.get('after') || '';
  const before = params.get('before') || '';
  const tenant = params.get('tenant') || '';
  const list = h('div', { id: 'audit' });
  const form = h('form', { class: 'inline', 'aria-label': 'Filter the audit log', onsubmit: (e) => {
    e.preventDefault();
    const fd = new FormData(form);
    location.hash = href(route, { action: fd.get('action'), after: fd.get('after'), before: fd.get('before'), tenant: fd.get('tenant') });
  } },
  withTenant ? field('Tenant', h('input', { name: 'tenant', value: tenant })) : null,
  field('Action', h('select', { name: 'action' }, h('option', { value: '' }, 'any'),
    ACTIONS.map((a) => h('option', { value: a, selected: a === action }, a)))),
  field('Started after', h('input', { name: 'after', type: 'datetime-local', step: '1', value: after })),
  field('Started before', h('input', { name: 'before', type: 'datetime-local', step: '1', value: before })),
  h('button', { type: 'submit' }, 'Show'));
  replace(container, h('h1', null, title), form, list);
  let page;
  try {
    page = { action: action || undefined, startedAfter: toISO(after), startedBefore: toISO(before), pageSize: 50 };
  } catch (e) {
    replace(list, errorBox(e, 'Filter'));
    return;
  }
  const tokens = [''];
  let index = 0;
  const go = async () => {
    try {
      const r = await load({ ...page, pageToken: tokens[index] }, tenant);
      if (r.nextPageToken) tokens[index + 1] = r.nextPageToken;
      replace(list, recordsTable(r.records || [], withTenant), h('nav', { class: 'pager', 'aria-label': 'Pages' },
        h('button', { type: 'button', disabled: index === 0, onclick: () => { index--; go(); } }, '← Previous'),
        h('span', { class: 'muted' }, `page ${index + 1}`),
        h('button', { type: 'button', disabled: !r.nextPageToken, onclick: () => { index++; go(); } }, 'Next →')));
    } catch (e) {
      replace(list, errorBox(e, 'Listing'));
    }
  };
  await go();
}

export function auditView(container, { params }) {
  return auditPage(container, params, {
    title: 'Deletion audit log', route: 'audit', withTenant: false,
    load: (page) => rpc('TenantService', 'ListAuditRecords', page),
  });
}

export function platformAuditView(container, { params }) {
  return auditPage(container, params, {
    title: 'Deletion audit log, all tenants', route: 'platform-audit', withTenant: true,
    load: (page, tenant) => rpc('AdminService', 'ListAuditRecords', { tenantId: tenant || undefined, page }),
  });
}
