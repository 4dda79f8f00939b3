// Instances: the filtered, paged listing with counts by status, and the bulk
// delete by filter (a dry-run count first, then batches with a progress bar
// that can pause and resume).
import {
  h, replace, field, table, link, href, statusBadge, timeEl, num, errorBox, dialog, STATUSES, TERMINAL, statusLabel, ID_PATTERN, takeFlash,
} from './dom.js';
import { rpc, session } from './api.js';

const PAGE_SIZES = ['25', '50', '100', '250'];
const ORDERS = {
  CREATED_DESC: 'Newest first',
  CREATED_ASC: 'Oldest first',
  UPDATED_DESC: 'Recently changed first',
  UPDATED_ASC: 'Least recently changed first',
};
const RANGES = [
  ['created', 'Started'],
  ['completed', 'Ended'],
  ['updated', 'Changed'],
];

// The page tokens of the listing on screen: tokens[i] opens page i.
const paging = { key: '', tokens: [''], index: 0 };

// toISO reads a datetime-local value (local time) as an RFC 3339 instant.
function toISO(v) {
  if (!v) return undefined;
  const d = new Date(v);
  if (Number.isNaN(d.getTime())) throw new Error(`"${v}" is not a date and time`);
  return d.toISOString();
}

// filterOf turns the route's parameters into an API InstanceFilter.
export function filterOf(p) {
  const f = {};
  const statuses = p.getAll('status').filter((s) => STATUSES.includes(s));
  if (statuses.length) f.statuses = statuses.map((s) => `INSTANCE_STATUS_${s}`);
  if (p.get('name')) f.name = p.get('name');
  if (p.get('name_prefix')) f.namePrefix = p.get('name_prefix');
  if (p.get('id_prefix')) f.instanceIdPrefix = p.get('id_prefix');
  if (p.get('parent')) f.parentInstanceId = p.get('parent');
  if (p.get('roots') === '1') f.rootsOnly = true;
  for (const [key] of RANGES) {
    for (const side of ['after', 'before']) {
      const v = toISO(p.get(`${key}_${side}`));
      if (v) f[`${key}${side === 'after' ? 'After' : 'Before'}`] = v;
    }
  }
  const tags = {};
  for (const t of p.getAll('tag')) {
    const i = t.indexOf('=');
    if (i > 0) tags[t.slice(0, i)] = t.slice(i + 1);
  }
  if (Object.keys(tags).length) f.tags = tags;
  return f;
}

function filterForm(p) {
  const input = (name, props) => h('input', { name, value: p.get(name) || '', autocomplete: 'off', ...props });
  const statusBoxes = h('fieldset', { class: 'statuses' }, h('legend', null, 'Status'),
    STATUSES.map((s) => h('label', { class: 'check' },
      h('input', { type: 'checkbox', name: 'status', value: s, checked: p.getAll('status').includes(s) }), statusLabel(s))));
  const ranges = RANGES.map(([key, label]) => h('fieldset', { class: 'range' }, h('legend', null, label),
    field('after', input(`${key}_after`, { type: 'datetime-local', step: '1' })),
    field('before', input(`${key}_before`, { type: 'datetime-local', step: '1' }))));
  const order = h('select', { name: 'order' }, Object.entries(ORDERS).map(([v, l]) =>
    h('option', { value: v, selected: (p.get('order') || 'CREATED_DESC') === v }, l)));
  const size = h('select', { name: 'size' }, PAGE_SIZES.map((v) =>
    h('option', { value: v, selected: (p.get('size') || '50') === v }, v)));
  const more = ['parent', 'tag', ...RANGES.flatMap(([key]) => [`${key}_after`, `${key}_before`])].some((k) => p.get(k));
  const form = h('form', { class: 'filters', 'aria-label': 'Filter instances', onsubmit: (e) => {
    e.preventDefault();
    const fd = new FormData(form);
    const params = {};
    for (const k of ['name', 'name_prefix', 'id_prefix', 'parent', 'order', 'size',
      ...RANGES.flatMap(([key]) => [`${key}_after`, `${key}_before`])]) params[k] = fd.get(k) || '';
    if (params.order === 'CREATED_DESC') params.order = '';
    if (params.size === '50') params.size = '';
    params.status = fd.getAll('status');
    params.roots = fd.get('roots') === '1';
    params.tag = String(fd.get('tags') || '').split('\n').map((t) => t.trim()).filter(Boolean);
    location.hash = href('instances', params);
  } },
  h('div', { class: 'filter-row' },
    statusBoxes,
    field('Orchestration name', input('name', { placeholder: 'exact', pattern: ID_PATTERN })),
    field('Name starts with', input('name_prefix', { pattern: ID_PATTERN })),
    field('Instance id starts with', input('id_prefix', { pattern: ID_PATTERN })),
    h('div', { class: 'field' }, h('span', { class: 'label' }, 'Tree'),
      h('label', { class: 'check' }, h('input', { type: 'checkbox', name: 'roots', value: '1', checked: p.get('roots') === '1' }), 'Roots only')),
    field('Order', order),
    field('Page size', size)),
  h('details', { class: 'more-filters', open: more },
    h('summary', null, 'Time ranges, tags, children of an instance'),
    h('div', { class: 'filter-row' },
      ranges,
      field('Tags (key=value, one a line)', h('textarea', { name: 'tags', rows: '2', value: p.getAll('tag').join('\n') })),
      field('Children of instance', input('parent', { pattern: ID_PATTERN })))),
  h('div', { class: 'actions' },
    h('button', { type: 'submit', class: 'primary', id: 'apply-filters' }, 'Apply'),
    h('a', { href: '#/instances', class: 'button' }, 'Clear')));
  return form;
}

function countsBar(counts, p) {
  const by = counts.byStatus || {};
  const keys = { RUNNING: 'running', COMPLETED: 'completed', FAILED: 'failed', CANCELLED: 'cancelled', CONTINUED_AS_NEW: 'continuedAsNew' };
  const chips = Object.entries(keys).filter(([s, k]) => s !== 'CONTINUED_AS_NEW' || Number(by[k] || 0) > 0).map(([s, k]) => {
    const params = Object.fromEntries([...new Set(p.keys())].map((key) => [key, p.getAll(key)]));
    params.status = [s];
    return h('a', { class: `chip st-${s.toLowerCase()}`, href: href('instances', params), title: `Only ${statusLabel(s).toLowerCase()}` },
      statusLabel(s), ' ', h('strong', null, num(by[k])));
  });
  return h('div', { class: 'counts', id: 'counts' }, h('span', { class: 'total' }, h('strong', null, num(counts.total)), ' matching'), chips);
}

function rowsTable(instances) {
  return table([
    { title: 'Instance', cell: (i) => link(i.instanceId, ['instance', i.instanceId], null, { class: 'mono' }) },
    { title: 'Orchestration', cell: (i) => [link(i.name, ['definition', i.name], { version: i.version }), h('span', { class: 'muted' }, ` v${i.version}`)] },
    { title: 'Status', cell: (i) => statusBadge(i.status) },
    { title: 'Started', cell: (i) => timeEl(i.createdAt) },
    { title: 'Ended', cell: (i) => timeEl(i.completedAt) },
    { title: 'Executions', class: 'n', cell: (i) => num(i.executionCount) },
    { title: 'Events', class: 'n', cell: (i) => num(i.eventCount) },
    { title: 'Parent', cell: (i) => (i.parentInstanceId ? link(i.parentInstanceId, ['instance', i.parentInstanceId], null, { class: 'mono' }) : h('span', { class: 'muted' }, 'root')) },
  ], instances, { empty: 'No instance matches.' });
}

export async function instancesView(container, { params }) {
  const key = params.toString();
  if (paging.key !== key) Object.assign(paging, { key, tokens: [''], index: 0 });
  let filter;
  const head = h('div', { class: 'page-head' }, h('h1', null, 'Instances'));
  const bulkArea = h('div', { id: 'bulk' });
  const countsArea = h('div');
  const listArea = h('div', { id: 'instances', 'aria-live': 'polite' });
  replace(container, head, filterForm(params), countsArea, bulkArea, listArea);
  head.after(h('div', { id: 'flash', 'aria-live': 'polite' }, takeFlash()));
  try {
    filter = filterOf(params);
  } catch (e) {
    listArea.append(errorBox(e, 'Filter'));
    return;
  }
  if (session.can('client')) {
    head.append(h('button', { type: 'button', class: 'danger', id: 'bulk-delete', onclick: () => bulkDelete(bulkArea, filter) }, 'Delete matching…'));
  }
  const order = params.get('order');
  const req = { filter, pageSize: Number(params.get('size') || 50) };
  if (order && ORDERS[order]) req.order = `INSTANCE_ORDER_${order}`;

  const loadPage = async () => {
    replace(listArea, h('p', { class: 'muted' }, 'Loading…'));
    const page = await rpc('ClientService', 'ListInstances', { ...req, pageToken: paging.tokens[paging.index] });
    const next = page.nextPageToken || '';
    if (next) paging.tokens[paging.index + 1] = next;
    const prevBtn = h('button', { type: 'button', id: 'prev-page', disabled: paging.index === 0, onclick: () => { paging.index--; loadPage().catch(showErr); } }, '← Previous');
    const nextBtn = h('button', { type: 'button', id: 'next-page', disabled: !next, onclick: () => { paging.index++; loadPage().catch(showErr); } }, 'Next →');
    replace(listArea, rowsTable(page.instances || []),
      h('nav', { class: 'pager', 'aria-label': 'Pages' }, prevBtn, h('span', { class: 'muted' }, `page ${paging.index + 1}`), nextBtn));
  };
  const showErr = (e) => replace(listArea, errorBox(e, 'Listing'));
  const counting = rpc('ClientService', 'CountInstances', { filter })
    .then((c) => replace(countsArea, countsBar(c, params)))
    .catch((e) => replace(countsArea, errorBox(e, 'Counting')));
  await Promise.all([loadPage().catch(showErr), counting]);
}

// dryRunFilter is what a bulk delete can delete of filter: terminal roots.
function dryRunFilter(filter) {
  const terminal = TERMINAL.map((s) => `INSTANCE_STATUS_${s}`);
  const statuses = filter.statuses ? filter.statuses.filter((s) => terminal.includes(s)) : terminal;
  return { ...filter, rootsOnly: true, statuses };
}

async function bulkDelete(area, filter) {
  if (filter.parentInstanceId) {
    replace(area, errorBox({ message: 'A bulk delete deletes root instances with their trees; it cannot select children of an instance. Clear “Children of instance” first.' }, 'Bulk delete'));
    return;
  }
  const target = dryRunFilter(filter);
  let total = 0;
  let matching = 0;
  try {
    if (target.statuses.length) total = Number((await rpc('ClientService', 'CountInstances', { filter: target })).total || 0);
    matching = Number((await rpc('ClientService', 'CountInstances', { filter })).total || 0);
  } catch (e) {
    replace(area, errorBox(e, 'Dry run'));
    return;
  }
  const ok = await dialog('Delete matching instances', (close) => [
    h('div', { class: 'dlg-body', id: 'dry-run' },
      h('p', null, 'Dry run: ', h('strong', { id: 'dry-run-count' }, num(total)),
        ` terminal root instance${total === 1 ? '' : 's'} of the ${num(matching)} matching this filter would be deleted.`),
      h('ul', null,
        h('li', null, 'Each goes with its whole tree: sub-orchestrations, executions, history and queued messages.'),
        h('li', null, 'Running instances, and trees with a running member, are skipped: cancel them first.'),
        h('li', null, 'Instances that end while this runs and match the filter are deleted too.'),
        h('li', null, 'This cannot be undone.'))),
    h('div', { class: 'actions' },
      h('button', { type: 'button', onclick: () => close(false) }, 'Cancel'),
      h('button', { type: 'button', class: 'danger', id: 'bulk-confirm', disabled: total === 0, onclick: () => close(true) },
        `Delete ${num(total)} instance${total === 1 ? '' : 's'}`)),
  ]);
  if (!ok) return;
  runBulk(area, filter, target, total);
}

// runBulk sends DeleteInstances batches until the API says complete, and
// shows progress as the drop of the dry-run count. Pause stops after the
// batch in flight; Resume goes on from the API's next request.
function runBulk(area, filter, target, total) {
  const bar = h('progress', { id: 'bulk-progress', max: String(Math.max(total, 1)), value: '0' });
  const status = h('p', { id: 'bulk-status', 'aria-live': 'polite' }, 'Starting…');
  const pauseBtn = h('button', { type: 'button', id: 'bulk-pause' }, 'Pause');
  const sum = { instancesDeleted: 0, executionsDeleted: 0, eventsDeleted: 0, queueMessagesDeleted: 0 };
  // A filter with no criterion (roots only is none: a bulk delete takes
  // roots only) must say all: the API never widens a delete by omission.
  const criteria = Object.entries(filter).filter(([k, v]) => k !== 'rootsOnly' && v !== undefined && v !== null && v !== '' && v !== false
    && !(Array.isArray(v) && v.length === 0) && !(typeof v === 'object' && !Array.isArray(v) && Object.keys(v).length === 0));
  let next = criteria.length ? { filter, limit: 100 } : { all: true, limit: 100 };
  let paused = false;
  let running = false;
  const describe = () => `${num(sum.instancesDeleted)} instances (sub-orchestrations included), ${num(sum.executionsDeleted)} executions, ${num(sum.eventsDeleted)} events deleted`;
  const loop = async () => {
    running = true;
    pauseBtn.textContent = 'Pause';
    try {
      while (!paused) {
        const res = await rpc('ClientService', 'DeleteInstances', next);
        for (const k of Object.keys(sum)) sum[k] += Number((res.counts || {})[k] || 0);
        const left = Number((await rpc('ClientService', 'CountInstances', { filter: target })).total || 0);
        bar.value = String(Math.max(total - left, 0));
        if (res.complete) {
          bar.value = bar.max;
          replace(status, `Done: ${describe()}.`, left ? ` ${num(left)} skipped (running members).` : '');
          pauseBtn.remove();
          area.append(h('a', { href: location.hash, class: 'button', id: 'bulk-refresh', onclick: (e) => { e.preventDefault(); window.dispatchEvent(new HashChangeEvent('hashchange')); } }, 'Refresh the list'));
          return;
        }
        next = res.next;
        replace(status, `Deleting… ${describe()}; ${num(left)} left.`);
      }
      replace(status, `Paused: ${describe()}.`);
      pauseBtn.textContent = 'Resume';
    } catch (e) {
      area.append(errorBox(e, 'Bulk delete stopped'));
      paused = true;
      pauseBtn.textContent = 'Resume';
    } finally {
      running = false;
    }
  };
  pauseBtn.addEventListener('click', () => {
    if (running) {
      paused = true;
      pauseBtn.textContent = 'Pausing…';
    } else {
      paused = false;
      loop();
    }
  });
  replace(area, h('section', { class: 'panel', 'aria-label': 'Bulk delete' },
    h('h2', null, 'Bulk delete'), h('label', { for: 'bulk-progress' }, 'Progress'), bar, status, pauseBtn));
  loop();
}
