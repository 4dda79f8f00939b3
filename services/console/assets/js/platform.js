// Platform views (platform-admin): tenants (create, suspend, limits), usage
// across tenants, janitor runs.
import { h, replace, field, table, href, timeEl, num, errorBox, notice, dialog, confirm, busy, ID_PATTERN } from './dom.js';
import { rpc } from './api.js';

const STATE = { TENANT_STATE_ACTIVE: 'active', TENANT_STATE_SUSPENDED: 'suspended', TENANT_STATE_DELETING: 'deleting' };
const LIMIT_FIELDS = [
  ['requestsPerSecond', 'Requests per second', '0', '100000', 'any'],
  ['burst', 'Burst', '0', '1000000', '1'],
  ['startsPerSecond', 'Starts per second', '0', '100000', 'any'],
  ['startsBurst', 'Starts burst', '0', '1000000', '1'],
  ['maxRunningInstances', 'Running instances', '0', '100000000', '1'],
  ['maxPayloadBytes', 'Payload bytes', '0', '16777216', '1'],
  ['maxHistoryEventsPerExecution', 'History events per execution', '0', '1000000', '1'],
];

// pager renders a paged list: load(token) -> {rows, next}; tokens kept in memory.
function pager(area, render, load) {
  const tokens = [''];
  let index = 0;
  const go = async () => {
    replace(area, h('p', { class: 'muted' }, 'Loading…'));
    try {
      const { rows, next } = await load(tokens[index]);
      if (next) tokens[index + 1] = next;
      replace(area, render(rows), h('nav', { class: 'pager', 'aria-label': 'Pages' },
        h('button', { type: 'button', disabled: index === 0, onclick: () => { index--; go(); } }, '← Previous'),
        h('span', { class: 'muted' }, `page ${index + 1}`),
        h('button', { type: 'button', disabled: !next, onclick: () => { index++; go(); } }, 'Next →')));
    } catch (e) {
      replace(area, errorBox(e, 'Listing'));
    }
  };
  return go();
}

function stateBadge(s) {
  const n = STATE[s] || 'unknown';
  return h('span', { class: `badge tenant-${n}` }, n);
}

async function editLimits(t, out, reload) {
  const cur = t.limits || {};
  const inputs = {};
  const limits = await dialog(`Limits of ${t.tenantId}`, (close) => [
    h('p', null, 'Zero means the platform default (starts per second: the request rate). The limits not shown here keep their values. The new limits apply within seconds.'),
    LIMIT_FIELDS.map(([k, label, min, max, step]) => {
      inputs[k] = h('input', { id: `limit-${k}`, type: 'number', min, max, step, value: String(cur[k] ?? 0) });
      return field(label, inputs[k]);
    }),
    h('div', { class: 'actions' },
      h('button', { type: 'button', onclick: () => close() }, 'Cancel'),
      // UpdateTenant replaces the limits whole: the fields the form does
      // not show go back as they came.
      h('button', { type: 'button', class: 'primary', id: 'limits-save', onclick: () => close({ ...cur, ...Object.fromEntries(
        LIMIT_FIELDS.map(([k]) => [k, Number(inputs[k].value || 0)])) }) }, 'Save limits')),
  ]);
  if (!limits) return;
  try {
    await rpc('AdminService', 'UpdateTenant', { tenantId: t.tenantId, limits });
    replace(out, notice(`Limits of ${t.tenantId} saved.`));
    reload();
  } catch (e) {
    replace(out, errorBox(e, 'Limits'));
  }
}

async function setState(t, suspend, out, reload) {
  const ok = await confirm(suspend ? `Suspend ${t.tenantId}` : `Resume ${t.tenantId}`,
    h('p', null, suspend
      ? 'Its calls are refused (PERMISSION_DENIED) and its instances stop progressing until it is resumed. Nothing is deleted.'
      : 'Its calls are served again and its instances go on where they stopped.'),
    suspend ? 'Suspend' : 'Resume', { danger: suspend });
  if (!ok) return;
  try {
    await rpc('AdminService', 'UpdateTenant', { tenantId: t.tenantId, state: suspend ? 'TENANT_STATE_SUSPENDED' : 'TENANT_STATE_ACTIVE' });
    replace(out, notice(`${t.tenantId} ${suspend ? 'suspended' : 'resumed'}.`));
    reload();
  } catch (e) {
    replace(out, errorBox(e, suspend ? 'Suspend' : 'Resume'));
  }
}

export async function tenantsView(container) {
  const out = h('div', { id: 'tenants-result', 'aria-live': 'polite' });
  const list = h('div', { id: 'tenants' });
  const idInput = h('input', { id: 'new-tenant', required: true, pattern: ID_PATTERN, maxlength: '200' });
  const create = h('button', { type: 'submit', class: 'primary', id: 'create-tenant' }, 'Create tenant');
  const reload = () => pager(list, (rows) => table([
    { title: 'Tenant', cell: (t) => h('span', { class: 'mono' }, t.tenantId) },
    { title: 'State', cell: (t) => stateBadge(t.state) },
    { title: 'Requests/s', class: 'n', cell: (t) => num((t.limits || {}).requestsPerSecond) },
    { title: 'Running max', class: 'n', cell: (t) => num((t.limits || {}).maxRunningInstances) },
    { title: 'Created', cell: (t) => timeEl(t.createdAt) },
    { title: 'Actions', cell: (t) => h('div', { class: 'row-actions' },
      t.state === 'TENANT_STATE_SUSPENDED'
        ? h('button', { type: 'button', onclick: () => setState(t, false, out, reload) }, 'Resume…')
        : h('button', { type: 'button', class: 'danger', onclick: () => setState(t, true, out, reload) }, 'Suspend…'),
      h('button', { type: 'button', onclick: () => editLimits(t, out, reload) }, 'Limits…'),
      h('a', { class: 'button', href: href('platform-usage', { tenant: t.tenantId }) }, 'Usage'),
      h('a', { class: 'button', href: href('janitor', { tenant: t.tenantId }) }, 'Janitor runs')) },
  ], rows, { empty: 'No tenants.' }), async (pageToken) => {
    const r = await rpc('AdminService', 'ListTenants', { pageSize: 50, pageToken });
    return { rows: r.tenants || [], next: r.nextPageToken };
  });
  const form = h('form', { class: 'inline', 'aria-label': 'Create a tenant', onsubmit: (e) => {
    e.preventDefault();
    busy(create, async () => {
      try {
        await rpc('AdminService', 'CreateTenant', { tenantId: idInput.value });
        replace(out, notice(`Tenant ${idInput.value} created (active, platform default limits, keeps everything).`));
        idInput.value = '';
        reload();
      } catch (err) {
        replace(out, errorBox(err, 'Create tenant'));
      }
    });
  } }, field('New tenant id', idInput), create);
  replace(container, h('h1', null, 'Tenants'), form, out, list);
  await reload();
}

export async function platformUsageView(container, { params }) {
  const tenant = params.get('tenant') || '';
  const list = h('div', { id: 'platform-usage' });
  replace(container, h('h1', null, tenant ? `Usage of ${tenant}` : 'Usage by tenant'), list);
  await pager(list, (rows) => table([
    { title: 'Tenant', cell: (t) => h('span', { class: 'mono' }, t.tenantId) },
    { title: 'Running', class: 'n', cell: (t) => num(((t.usage || {}).instances || {}).running) },
    { title: 'Completed', class: 'n', cell: (t) => num(((t.usage || {}).instances || {}).completed) },
    { title: 'Failed', class: 'n', cell: (t) => num(((t.usage || {}).instances || {}).failed) },
    { title: 'Cancelled', class: 'n', cell: (t) => num(((t.usage || {}).instances || {}).cancelled) },
    { title: 'Executions', class: 'n', cell: (t) => num((t.usage || {}).executions) },
    { title: 'Events', class: 'n', cell: (t) => num((t.usage || {}).events) },
    { title: 'Queued', class: 'n', cell: (t) => num((t.usage || {}).queuedMessages) },
    { title: 'Measured', cell: (t) => timeEl((t.usage || {}).measuredAt) },
  ], rows, { empty: 'No tenants.' }), async (pageToken) => {
    const r = await rpc('AdminService', 'GetUsage', { tenantIds: tenant ? [tenant] : [], pageSize: 50, pageToken });
    return { rows: r.tenants || [], next: r.nextPageToken };
  });
}

export async function janitorView(container, { params }) {
  const tenant = params.get('tenant') || '';
  const list = h('div', { id: 'janitor-runs' });
  const out = h('div', { 'aria-live': 'polite' });
  const trigger = h('button', { type: 'button', id: 'trigger-retention', onclick: () => busy(trigger, async () => {
    try {
      const r = await rpc('AdminService', 'TriggerRetention', { tenantId: tenant || undefined });
      replace(out, notice(`${num(r.runsQueued)} retention run(s) queued.`));
    } catch (e) {
      replace(out, errorBox(e, 'Trigger retention'));
    }
  }) }, tenant ? `Run retention for ${tenant} now` : 'Run retention for every tenant now');
  const filter = h('form', { class: 'inline', onsubmit: (e) => {
    e.preventDefault();
    location.hash = href('janitor', { tenant: new FormData(filter).get('tenant') });
  } }, field('Tenant', h('input', { name: 'tenant', value: tenant })), h('button', { type: 'submit' }, 'Show'));
  replace(container, h('div', { class: 'page-head' }, h('h1', null, 'Janitor runs'), trigger), filter, out, list);
  await pager(list, (rows) => table([
    { title: 'Started', cell: (r) => timeEl(r.startedAt) },
    { title: 'Tenant', cell: (r) => h('span', { class: 'mono' }, r.tenantId) },
    { title: 'Finished', cell: (r) => timeEl(r.finishedAt) },
    { title: 'Instances', class: 'n', cell: (r) => num(r.instancesDeleted) },
    { title: 'Executions', class: 'n', cell: (r) => num(r.executionsDeleted) },
    { title: 'Events', class: 'n', cell: (r) => num(r.eventsDeleted) },
    { title: 'Outcome', cell: (r) => (r.error ? h('span', { class: 'badge st-failed', title: r.error }, 'failed') : r.complete ? 'complete' : r.finishedAt ? 'budget spent, follow-up queued' : 'running') },
    { title: 'Why', cell: (r) => (r.triggered ? 'triggered' : 'periodic') },
    { title: 'Error', cell: (r) => (r.error ? h('code', { class: 'clip' }, r.error) : '') },
  ], rows, { empty: 'No janitor run yet.' }), async (pageToken) => {
    const r = await rpc('AdminService', 'ListJanitorRuns', { tenantId: tenant || undefined, pageSize: 50, pageToken });
    return { rows: r.runs || [], next: r.nextPageToken };
  });
}
