// One instance: its state, input/output/error, the history as a timeline,
// its executions, its sub-orchestration tree, its pending activities, and
// the actions on it (cancel, raise event, delete, prune).
import {
  h, append, replace, field, table, link, href, statusBadge, statusName, timeEl, fmtMillis, num, bytesText,
  textBytes, jsonBlock, errorBox, dialog, fmtDuration, busy, ID_PATTERN, flashNext, takeFlash,
} from './dom.js';
import { rpc, session } from './api.js';

const TABS = { history: 'History', executions: 'Executions', tree: 'Tree', pending: 'Pending activities' };
const HISTORY_PAGE = 200;
// How many events the pending-activities tab reads at most.
const PENDING_SCAN = 10000;

// What each history event kind says, for people.
const KIND_LABELS = {
  execution_started: 'Execution started',
  activity_scheduled: 'Activity scheduled',
  activity_completed: 'Activity completed',
  activity_failed: 'Activity failed',
  activity_cancel_requested: 'Activity cancelled',
  timer_created: 'Timer created',
  timer_fired: 'Timer fired',
  event_received: 'Event received',
  child_scheduled: 'Sub-orchestration started',
  child_completed: 'Sub-orchestration completed',
  child_failed: 'Sub-orchestration failed',
  child_cancel_requested: 'Sub-orchestration cancelled',
  cancel_requested: 'Cancel requested',
  continued_as_new: 'Continued as new',
  execution_completed: 'Execution completed',
  execution_failed: 'Execution failed',
  execution_cancelled: 'Execution cancelled',
};
const KIND_TONE = {
  execution_completed: 'ok', activity_completed: 'ok', child_completed: 'ok',
  execution_failed: 'bad', activity_failed: 'bad', child_failed: 'bad',
  execution_cancelled: 'warn', activity_cancel_requested: 'warn', child_cancel_requested: 'warn', cancel_requested: 'warn',
};
// Fields that answer an earlier event.
const REF_FIELDS = ['scheduled_id', 'timer_id'];

function isRunning(inst) {
  return statusName(inst.status) === 'RUNNING';
}

function summary(inst) {
  const dl = h('dl', { class: 'facts' });
  const fact = (k, v) => dl.append(h('dt', null, k), h('dd', null, v));
  fact('Status', statusBadge(inst.status));
  fact('Orchestration', [link(inst.name, ['definition', inst.name], { version: inst.version }), h('span', { class: 'muted' }, ` version ${inst.version}`)]);
  fact('Parent', inst.parentInstanceId ? link(inst.parentInstanceId, ['instance', inst.parentInstanceId], null, { class: 'mono', id: 'parent-link' }) : h('span', { class: 'muted' }, 'none (a root instance)'));
  if (inst.rootInstanceId && inst.rootInstanceId !== inst.instanceId) fact('Root', link(inst.rootInstanceId, ['instance', inst.rootInstanceId], null, { class: 'mono' }));
  fact('Started', timeEl(inst.createdAt));
  fact('Changed', timeEl(inst.updatedAt));
  fact('Ended', timeEl(inst.completedAt));
  fact('Execution', `${num(inst.currentExecutionId)} (${num(inst.executionCount)} kept)`);
  fact('History events', num(inst.eventCount));
  fact('Retention', inst.retention ? `kept ${fmtDuration(inst.retention)} once ended` : h('span', { class: 'muted' }, 'the tenant’s policy'));
  const tags = Object.entries(inst.tags || {});
  fact('Tags', tags.length ? h('ul', { class: 'tags' }, tags.map(([k, v]) => h('li', null, h('code', null, k), '=', h('code', null, v)))) : h('span', { class: 'muted' }, 'none'));
  return dl;
}

function payloads(inst) {
  return h('div', { class: 'payloads' },
    h('section', { 'aria-label': 'Input' }, h('h3', null, 'Input'), jsonBlock(bytesText(inst.input), 'Input')),
    h('section', { 'aria-label': 'Output' }, h('h3', null, 'Output'), jsonBlock(bytesText(inst.output), 'Output')),
    inst.error ? h('section', { 'aria-label': 'Error' }, h('h3', null, 'Error'), h('pre', { class: 'json err', id: 'instance-error' }, inst.error)) : null);
}

export async function instanceView(container, { segs, params, rerender }) {
  const id = segs[0];
  if (!id) throw new Error('no instance id in the address');
  const { instance: inst } = await rpc('ClientService', 'GetInstance', { instanceId: id });
  const tab = TABS[params.get('tab')] ? params.get('tab') : 'history';
  const flash = h('div', { id: 'flash', 'aria-live': 'polite' }, takeFlash());
  const actions = h('div', { class: 'actions', id: 'instance-actions' });
  if (session.can('client')) {
    if (isRunning(inst)) actions.append(h('button', { type: 'button', id: 'cancel', onclick: () => cancelInstance(inst, flash, rerender) }, 'Cancel…'));
    if (isRunning(inst)) actions.append(h('button', { type: 'button', id: 'raise', onclick: () => raiseEvent(inst, flash, rerender) }, 'Raise event…'));
    if (Number(inst.executionCount) > 1) actions.append(h('button', { type: 'button', id: 'prune', onclick: () => prune(inst, flash, rerender) }, 'Prune executions…'));
    actions.append(h('button', { type: 'button', class: 'danger', id: 'delete', onclick: () => deleteInstance(inst, flash) }, 'Delete…'));
  }
  actions.append(h('button', { type: 'button', id: 'refresh', onclick: rerender }, 'Refresh'));
  const tabs = h('div', { class: 'tabs', role: 'tablist', 'aria-label': 'Instance details' },
    Object.entries(TABS).map(([k, label]) => h('a', {
      role: 'tab', id: `tab-${k}`, 'aria-selected': String(k === tab), class: k === tab ? 'tab on' : 'tab',
      href: href(['instance', id], { tab: k === 'history' ? '' : k }),
    }, label, k === 'executions' ? ` (${num(inst.executionCount)})` : '')));
  const panel = h('div', { class: 'tab-panel', role: 'tabpanel', 'aria-labelledby': `tab-${tab}`, id: 'tab-panel' });
  replace(container,
    h('div', { class: 'page-head' }, h('h1', null, h('span', { class: 'muted' }, 'Instance '), h('span', { class: 'mono', id: 'instance-id' }, inst.instanceId)), actions),
    flash,
    h('div', { class: 'overview' }, summary(inst), payloads(inst)),
    tabs, panel);
  const exec = Number(params.get('exec') || 0);
  if (tab === 'history') await historyTab(panel, inst, exec);
  else if (tab === 'executions') await executionsTab(panel, inst);
  else if (tab === 'tree') await treeTab(panel, inst);
  else await pendingTab(panel, inst);
}

// eventFields shows an event's payload as its fields: scalars on one line,
// JSON documents (inputs, results) as blocks under it.
function eventFields(kind, payload) {
  let data;
  try {
    data = JSON.parse(payload || '{}');
  } catch {
    return h('pre', { class: 'json' }, payload);
  }
  if (data === null || typeof data !== 'object') return h('pre', { class: 'json' }, payload);
  const line = h('div', { class: 'ev-line' });
  const blocks = h('dl', { class: 'ev-fields' });
  for (const [k, v] of Object.entries(data)) {
    if (k === 'v') continue; // the payload format's version: storage, not the event
    const label = k.replace(/_/g, ' ');
    let value;
    if (REF_FIELDS.includes(k)) value = `event #${v}`;
    else if (k === 'fire_at') value = fmtMillis(v);
    else if (k === 'instance_id' && typeof v === 'string') value = link(v, ['instance', v], null, { class: 'mono' });
    else if (k === 'failure' && v && typeof v === 'object') value = [h('code', null, String(v.kind || '')), ' ', String(v.message || '')];
    else if (v !== null && typeof v === 'object') {
      blocks.append(h('dt', null, label), h('dd', null, h('pre', { class: 'json' }, JSON.stringify(v, null, 2))));
      continue;
    } else value = typeof v === 'string' ? h('code', null, v) : String(v);
    line.append(h('span', { class: 'ev-f' }, h('span', { class: 'muted' }, `${label} `), value));
  }
  return [line.children.length ? line : null, blocks.children.length ? blocks : null];
}

function eventItem(ev) {
  const kind = ev.kind || '';
  return h('li', { class: `ev ${KIND_TONE[kind] || ''}`, dataset: { kind } },
    h('div', { class: 'ev-head' },
      h('span', { class: 'ev-id' }, `#${ev.eventId}`),
      h('span', { class: 'ev-kind' }, KIND_LABELS[kind] || kind),
      timeEl(ev.createdAt)),
    eventFields(kind, bytesText(ev.payload)));
}

async function historyTab(panel, inst, exec) {
  const executionId = exec || Number(inst.currentExecutionId);
  const list = h('ol', { class: 'timeline', id: 'history' });
  const more = h('div');
  replace(panel, h('h2', null, `History of execution ${executionId}`,
    executionId !== Number(inst.currentExecutionId) ? h('span', { class: 'muted' }, ' (a past execution)') : ''), list, more);
  let after = 0;
  const load = async () => {
    const page = await rpc('ClientService', 'GetHistory', { instanceId: inst.instanceId, executionId, afterEventId: after, pageSize: HISTORY_PAGE });
    append(list, (page.events || []).map(eventItem));
    after = Number(page.nextAfterEventId || 0);
    replace(more, after ? h('button', { type: 'button', id: 'more-history', onclick: (e) => busy(e.target, load).catch((err) => more.append(errorBox(err))) }, 'Load more events') : null);
    if (!list.children.length) list.append(h('li', { class: 'muted' }, 'No events.'));
  };
  await load();
}

async function executionsTab(panel, inst) {
  const { executions = [] } = await rpc('ClientService', 'ListExecutions', { instanceId: inst.instanceId });
  replace(panel, h('h2', null, 'Executions'),
    h('p', { class: 'muted' }, 'Each continue-as-new ends an execution and starts the next; pruned executions are gone.'),
    table([
      { title: 'Execution', class: 'n', cell: (e) => link(String(e.executionId), ['instance', inst.instanceId], { exec: e.executionId }) },
      { title: 'Status', cell: (e) => statusBadge(e.status) },
      { title: 'Started', cell: (e) => timeEl(e.startedAt) },
      { title: 'Ended', cell: (e) => timeEl(e.completedAt) },
      { title: 'Events', class: 'n', cell: (e) => num(e.eventCount) },
      { title: 'Input', cell: (e) => h('code', { class: 'clip' }, bytesText(e.input)) },
      { title: 'Output or error', cell: (e) => h('code', { class: 'clip' }, e.error || bytesText(e.output)) },
    ], executions, { empty: 'No executions.' }));
}

// treeNode is one instance of the tree; its children load when opened, a
// page at a time (ListInstances by parent).
function treeNode(i, currentId, open) {
  const node = h('details', { class: 'tree-node', open });
  const kids = h('ul', { class: 'tree-kids' });
  let token = '';
  let loaded = false;
  const loadKids = async () => {
    const page = await rpc('ClientService', 'ListInstances', {
      filter: { parentInstanceId: i.instanceId }, order: 'INSTANCE_ORDER_CREATED_ASC', pageSize: 50, pageToken: token,
    });
    for (const c of page.instances || []) kids.append(h('li', null, treeNode(c, currentId, false)));
    token = page.nextPageToken || '';
    if (!kids.children.length) kids.append(h('li', { class: 'muted' }, 'no sub-orchestrations'));
    if (token) kids.append(h('li', null, h('button', { type: 'button', class: 'link', onclick: (e) => { e.target.parentElement.remove(); loadKids().catch((err) => kids.append(errorBox(err))); } }, 'more…')));
  };
  node.addEventListener('toggle', () => {
    if (node.open && !loaded) {
      loaded = true;
      loadKids().catch((err) => kids.append(errorBox(err)));
    }
  });
  node.append(
    h('summary', null,
      i.instanceId === currentId ? h('strong', { class: 'mono' }, i.instanceId) : link(i.instanceId, ['instance', i.instanceId], null, { class: 'mono' }),
      ' ', statusBadge(i.status), ' ', h('span', { class: 'muted' }, i.name)),
    kids);
  return node;
}

async function treeTab(panel, inst) {
  const rootId = inst.rootInstanceId || inst.instanceId;
  const [tree, root] = await Promise.all([
    rpc('ClientService', 'GetInstanceTree', { instanceId: rootId }),
    rootId === inst.instanceId ? { instance: inst } : rpc('ClientService', 'GetInstance', { instanceId: rootId }),
  ]);
  const n = (tree.instanceIds || []).length;
  replace(panel, h('h2', null, 'Sub-orchestration tree'),
    h('p', { class: 'muted', id: 'tree-size' }, `${num(n)} instance${n === 1 ? '' : 's'} in this tree. Open a node to list its children.`),
    h('div', { class: 'tree', id: 'tree' }, treeNode(root.instance, inst.instanceId, true)));
}

// pendingActivities: scheduled attempts with no completion, failure or
// cancellation among the events read.
function pendingActivities(events) {
  const open = new Map();
  for (const ev of events) {
    const data = JSON.parse(bytesText(ev.payload) || '{}');
    if (ev.kind === 'activity_scheduled') open.set(Number(ev.eventId), { ev, data });
    else if (['activity_completed', 'activity_failed', 'activity_cancel_requested'].includes(ev.kind)) open.delete(Number(data.scheduled_id));
  }
  return [...open.values()];
}

async function pendingTab(panel, inst) {
  replace(panel, h('h2', null, 'Pending activities'));
  if (!isRunning(inst)) {
    panel.append(h('p', { class: 'muted' }, 'None: the instance is not running.'));
    return;
  }
  // The current execution's history, read to its end or to PENDING_SCAN
  // events, whichever comes first.
  const events = [];
  let after = 0;
  let executionId = 0;
  do {
    const page = await rpc('ClientService', 'GetHistory', { instanceId: inst.instanceId, executionId, afterEventId: after, pageSize: 1000 });
    executionId = Number(page.executionId);
    events.push(...(page.events || []));
    after = Number(page.nextAfterEventId || 0);
  } while (after && events.length < PENDING_SCAN);
  const pending = pendingActivities(events);
  if (after) panel.append(h('p', { class: 'warnbox' }, `Judged from the first ${num(events.length)} events of execution ${executionId}; later events may complete some of these or schedule more.`));
  panel.append(table([
    { title: 'Activity', cell: (p) => h('code', null, p.data.name) },
    { title: 'Task queue', cell: (p) => h('code', null, p.data.task_queue) },
    { title: 'Attempt', class: 'n', cell: (p) => String(p.data.attempt) },
    { title: 'Scheduled', cell: (p) => timeEl(p.ev.createdAt) },
    { title: 'Input', cell: (p) => h('code', { class: 'clip' }, JSON.stringify(p.data.input ?? null)) },
  ], pending, { empty: 'None: the instance waits on no activity.' }));
}

async function cancelInstance(inst, flash, rerender) {
  const reason = await dialog('Cancel instance', (close) => {
    const input = h('input', { id: 'cancel-reason', maxlength: '1024' });
    return [
      h('p', null, 'The instance’s outstanding activities and sub-orchestrations are cancelled and it ends as Cancelled. Nothing is deleted.'),
      field('Reason (recorded as the error)', input),
      h('div', { class: 'actions' },
        h('button', { type: 'button', onclick: () => close() }, 'Keep running'),
        h('button', { type: 'button', class: 'danger', id: 'cancel-confirm', onclick: () => close(input.value) }, 'Cancel instance')),
    ];
  });
  if (reason === undefined) return;
  try {
    await rpc('ClientService', 'CancelInstance', { instanceId: inst.instanceId, reason });
  } catch (e) {
    replace(flash, errorBox(e, 'Cancel'));
    return;
  }
  flashNext('Cancel requested; the instance ends at its next turn.');
  rerender();
}

async function raiseEvent(inst, flash, rerender) {
  const ev = await dialog('Raise an event', (close) => {
    const name = h('input', { id: 'event-name', required: true, pattern: ID_PATTERN, maxlength: '200' });
    const payload = h('textarea', { id: 'event-payload', rows: '6', spellcheck: 'false', placeholder: '{"approved": true}' });
    const err = h('div');
    return [
      h('p', null, 'Delivers an external event to the instance’s wait_event steps; events that come early are kept in order.'),
      field('Event name', name),
      field('Payload (JSON, empty for null)', payload),
      err,
      h('div', { class: 'actions' },
        h('button', { type: 'button', onclick: () => close() }, 'Cancel'),
        h('button', { type: 'button', class: 'primary', id: 'event-send', onclick: () => {
          try {
            if (payload.value.trim()) JSON.parse(payload.value);
          } catch (e) {
            replace(err, errorBox({ message: `The payload is not JSON: ${e.message}` }));
            return;
          }
          close({ name: name.value, payload: payload.value.trim() });
        } }, 'Raise event')),
    ];
  });
  if (!ev) return;
  try {
    await rpc('ClientService', 'RaiseEvent', { instanceId: inst.instanceId, name: ev.name, payload: ev.payload ? textBytes(ev.payload) : undefined });
  } catch (e) {
    replace(flash, errorBox(e, 'Raise event'));
    return;
  }
  flashNext(`Event ${ev.name} queued.`);
  rerender();
}

async function prune(inst, flash, rerender) {
  const opts = await dialog('Prune executions', (close) => {
    const keep = h('input', { id: 'prune-keep', type: 'number', min: '1', max: '100000', value: '1' });
    const before = h('input', { id: 'prune-before', type: 'datetime-local', step: '1' });
    return [
      h('p', null, `Deletes past executions of this continue-as-new chain (${num(inst.executionCount)} kept now) with their history. The current execution and running ones are never pruned. Both criteria apply together.`),
      field('Keep the newest', keep, 'executions (empty: no count criterion)'),
      field('Only those ended before', before, 'empty: no time criterion'),
      h('div', { class: 'actions' },
        h('button', { type: 'button', onclick: () => close() }, 'Cancel'),
        h('button', { type: 'button', class: 'danger', id: 'prune-confirm', onclick: () => close({ keep: keep.value, before: before.value }) }, 'Prune')),
    ];
  });
  if (!opts) return;
  const options = {};
  if (opts.keep) options.keepLast = Number(opts.keep);
  if (opts.before) options.completedBefore = new Date(opts.before).toISOString();
  try {
    const res = await rpc('ClientService', 'PruneExecutions', { instanceId: inst.instanceId, options });
    const c = res.counts || {};
    flashNext(`Pruned ${num(c.executionsDeleted)} executions and ${num(c.eventsDeleted)} history events.`);
  } catch (e) {
    replace(flash, errorBox(e, 'Prune'));
    return;
  }
  rerender();
}

async function deleteInstance(inst, flash) {
  if (inst.parentInstanceId) {
    const root = inst.rootInstanceId || inst.parentInstanceId;
    await dialog('This instance cannot be deleted alone', (close) => [
      h('div', { class: 'dlg-body', id: 'delete-refused' },
        h('p', null, 'It is a sub-orchestration of ', link(inst.parentInstanceId, ['instance', inst.parentInstanceId], null, { class: 'mono' }),
          '. Orchard deletes a tree only as a whole, from its root, so that no parent is left waiting on a child that is gone.'),
        h('p', null, 'To delete it, delete its root ', link(root, ['instance', root], { tab: 'tree' }, { class: 'mono', onclick: () => close() }), ' with its whole tree.')),
      h('div', { class: 'actions' }, h('button', { type: 'button', onclick: () => close() }, 'Close')),
    ]);
    return;
  }
  let ids = [];
  let running = 0;
  try {
    ids = (await rpc('ClientService', 'GetInstanceTree', { instanceId: inst.instanceId })).instanceIds || [];
    if (ids.length <= 1000) {
      const c = await rpc('ClientService', 'CountInstances', { filter: { instanceIds: ids, statuses: ['INSTANCE_STATUS_RUNNING'] } });
      running = Number(c.total || 0);
    } else {
      running = -1; // unknown: too many to count in one call
    }
  } catch (e) {
    replace(flash, errorBox(e, 'Delete'));
    return;
  }
  const kids = ids.length - 1;
  const choice = await dialog('Delete instance', (close) => {
    const force = h('input', { type: 'checkbox', id: 'delete-force' });
    const go = h('button', { type: 'button', class: 'danger', id: 'delete-confirm', disabled: running !== 0, onclick: () => close({ force: force.checked }) },
      `Delete ${num(ids.length)} instance${ids.length === 1 ? '' : 's'}`);
    force.addEventListener('change', () => { go.disabled = running !== 0 && !force.checked; });
    return [
      h('div', { class: 'dlg-body', id: 'delete-what' },
        h('p', null, 'Deletes ', h('strong', { class: 'mono' }, inst.instanceId),
          kids ? [' and its ', h('strong', { id: 'delete-kids' }, num(kids)), ` sub-orchestration${kids === 1 ? '' : 's'}`] : '',
          ', with every execution, history event and queued message, in one transaction. This cannot be undone.'),
        running !== 0
          ? h('div', { class: 'warnbox' },
            h('p', null, running > 0 ? `${num(running)} instance${running === 1 ? ' of this tree is' : 's of this tree are'} running.` : 'Instances of this tree may be running.',
              ' A delete without force is refused while any runs. With force, their turns and activities in flight fail, and nothing can bring them back.'),
            h('label', { class: 'check' }, force, 'Force: delete the running instances too'))
          : null),
      h('div', { class: 'actions' },
        h('button', { type: 'button', onclick: () => close() }, 'Cancel'),
        go),
    ];
  });
  if (!choice) return;
  try {
    const res = await rpc('ClientService', 'DeleteInstance', { instanceId: inst.instanceId, force: choice.force });
    const c = res.counts || {};
    flashNext(`Deleted ${inst.instanceId}: ${num(c.instancesDeleted)} instances, ${num(c.executionsDeleted)} executions, ${num(c.eventsDeleted)} events, ${num(c.queueMessagesDeleted)} queued messages.`);
    location.hash = href('instances');
  } catch (e) {
    replace(flash, errorBox(e, 'Delete'));
  }
}
