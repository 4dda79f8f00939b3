// A tenant's own settings: the retention policy editor, and usage and limits.
import {
  h, replace, field, table, timeEl, num, errorBox, notice, busy, parseDuration, fmtDuration, confirm, statusBadge, ID_PATTERN,
} from './dom.js';
import { rpc } from './api.js';

const RULE_FIELDS = [
  ['completed', 'Keep completed'],
  ['failed', 'Keep failed'],
  ['cancelled', 'Keep cancelled'],
];

// ruleEditor edits one RetentionRule; empty fields are unset (inherited).
function ruleEditor(rule, prefix) {
  const r = rule || {};
  const can = r.continueAsNew || {};
  const inputs = {};
  const row = [];
  for (const [k, label] of RULE_FIELDS) {
    inputs[k] = h('input', { id: `${prefix}-${k}`, value: fmtDuration(r[k]), placeholder: 'inherit', size: '8' });
    row.push(field(label, inputs[k]));
  }
  inputs.keepLast = h('input', { id: `${prefix}-keep-last`, type: 'number', min: '1', max: '100000', value: can.keepLast ?? '', placeholder: 'inherit' });
  inputs.maxAge = h('input', { id: `${prefix}-max-age`, value: fmtDuration(can.maxAge), placeholder: 'inherit', size: '8' });
  inputs.autoPrune = h('select', { id: `${prefix}-auto-prune` },
    h('option', { value: '', selected: can.autoPrune === undefined }, 'inherit'),
    h('option', { value: 'true', selected: can.autoPrune === true }, 'yes'),
    h('option', { value: 'false', selected: can.autoPrune === false }, 'no'));
  row.push(field('Chains: keep last', inputs.keepLast), field('Chains: max age', inputs.maxAge), field('Prune at continue-as-new', inputs.autoPrune));
  const read = () => {
    const out = {};
    for (const [k, label] of RULE_FIELDS) {
      try {
        const d = parseDuration(inputs[k].value);
        if (d !== null) out[k] = d;
      } catch (e) {
        throw new Error(`${label}: ${e.message}`);
      }
    }
    const c = {};
    if (inputs.keepLast.value !== '') c.keepLast = Number(inputs.keepLast.value);
    const age = parseDuration(inputs.maxAge.value);
    if (age !== null) c.maxAge = age;
    if (inputs.autoPrune.value) c.autoPrune = inputs.autoPrune.value === 'true';
    if (Object.keys(c).length) out.continueAsNew = c;
    return out;
  };
  return { el: h('div', { class: 'rule' }, row), read };
}

// previewBox shows what a policy would delete if the janitor ran now.
function previewBox(p) {
  const at = p.lowerBound ? 'at least ' : '';
  const groups = p.groups || [];
  return h('div', { class: 'panel', id: 'retention-preview' },
    h('p', null, h('strong', null, `${at}${num(p.instances)} instances`), ` (sub-orchestrations included), ${at}${num(p.executions)} executions and ${at}${num(p.events)} history events would be deleted if the janitor ran now`,
      p.oldestCompletedAt ? [': roots that ended between ', timeEl(p.oldestCompletedAt), ' and ', timeEl(p.newestCompletedAt), '.'] : '.'),
    Number(p.prunedInstances || 0) > 0
      ? h('p', null, `Of which prunes of continue-as-new chains: ${num(p.prunedExecutions)} executions and ${num(p.prunedEvents)} events of ${num(p.prunedInstances)} instances.`)
      : null,
    groups.length ? table([
      { title: 'Status', cell: (g) => statusBadge(g.status) },
      { title: 'Orchestration', cell: (g) => h('code', null, g.name) },
      { title: 'Instances', class: 'n', cell: (g) => num(g.instances) },
      { title: 'Executions', class: 'n', cell: (g) => num(g.executions) },
      { title: 'Events', class: 'n', cell: (g) => num(g.events) },
    ], groups) : null,
    p.lowerBound ? h('p', { class: 'muted' }, 'Counting stopped at its cap or time limit: the figures are lower bounds.') : null,
    h('p', { class: 'muted' }, 'Judged at ', timeEl(p.evaluatedAt), '.'));
}

export async function retentionView(container) {
  const { policy = {} } = await rpc('TenantService', 'GetRetentionPolicy', {});
  const out = h('div', { id: 'retention-result', 'aria-live': 'polite' });
  const def = ruleEditor(policy.defaultRule, 'default');
  const rules = [];
  const rulesBox = h('div', { class: 'rules' });
  const addRule = (name, rule) => {
    const idx = rules.length;
    const nameInput = h('input', { id: `rule-${idx}-name`, value: name || '', required: true, pattern: ID_PATTERN });
    const ed = ruleEditor(rule, `rule-${idx}`);
    const box = h('fieldset', { class: 'panel' }, h('legend', null, 'Rule for an orchestration name'),
      field('Orchestration name', nameInput), ed.el,
      h('button', { type: 'button', class: 'link', onclick: () => { box.remove(); rules[idx] = null; } }, 'Remove this rule'));
    rules.push({ nameInput, read: ed.read });
    rulesBox.append(box);
  };
  for (const [name, rule] of Object.entries(policy.rulesByName || {}).sort()) addRule(name, rule);
  const readPolicy = () => {
    const next = { defaultRule: def.read(), rulesByName: {} };
    for (const r of rules.filter(Boolean)) next.rulesByName[r.nameInput.value] = r.read();
    return next;
  };
  const save = h('button', { type: 'submit', class: 'primary', id: 'retention-save' }, 'Save policy');
  const form = h('form', { onsubmit: (e) => {
    e.preventDefault();
    replace(out);
    let next;
    try {
      next = readPolicy();
    } catch (err) {
      replace(out, errorBox(err, 'Not saved'));
      return;
    }
    busy(save, async () => {
      let preview;
      try {
        preview = (await rpc('TenantService', 'PreviewRetention', { policy: next })).preview || {};
      } catch (err) {
        replace(out, errorBox(err, 'Not saved'));
        return;
      }
      const ok = await confirm('Replace the retention policy', [
        h('p', null, 'The janitor applies the new policy at its next run for this tenant. Judged now, it would delete:'),
        previewBox(preview)], 'Save policy', { danger: Number(preview.instances || 0) + Number(preview.executions || 0) > 0 });
      if (!ok) return;
      try {
        await rpc('TenantService', 'SetRetentionPolicy', { policy: next });
        replace(out, notice('Saved. The janitor applies it at its next run.'));
      } catch (err) {
        replace(out, errorBox(err, 'Not saved'));
      }
    });
  } },
  h('fieldset', { class: 'panel' }, h('legend', null, 'Default rule'), def.el),
  rulesBox,
  h('div', { class: 'actions' },
    h('button', { type: 'button', id: 'add-rule', onclick: () => addRule('', {}) }, 'Add a rule for a name'),
    h('button', { type: 'button', id: 'retention-preview-button', onclick: (e) => {
      replace(out);
      let next;
      try {
        next = readPolicy();
      } catch (err) {
        replace(out, errorBox(err, 'Preview'));
        return;
      }
      busy(e.target, async () => {
        try {
          replace(out, previewBox((await rpc('TenantService', 'PreviewRetention', { policy: next })).preview || {}));
        } catch (err) {
          replace(out, errorBox(err, 'Preview'));
        }
      });
    } }, 'Preview what it would delete'),
    save),
  out);
  replace(container, h('h1', null, 'Retention'),
    h('p', null, 'How long terminal instances are kept once they end, by status, and how continue-as-new chains are trimmed. Durations like 30d, 12h or 90m; empty inherits (a name’s rule from the default rule, the default rule from “keep forever”). An instance’s own retention, given at start, overrides both.'),
    form);
}

export async function usageView(container) {
  const [{ usage = {} }, { limits = {} }] = await Promise.all([
    rpc('TenantService', 'GetUsage', {}),
    rpc('TenantService', 'GetLimits', {}),
  ]);
  const i = usage.instances || {};
  replace(container, h('h1', null, 'Usage & limits'),
    h('div', { class: 'overview' },
      h('section', { 'aria-label': 'Usage' }, h('h2', null, 'Stored now'),
        table([{ title: 'What', cell: (r) => r[0] }, { title: 'How many', class: 'n', cell: (r) => num(r[1]) }], [
          ['Running instances', i.running], ['Completed instances', i.completed], ['Failed instances', i.failed],
          ['Cancelled instances', i.cancelled], ['Executions', usage.executions], ['History events', usage.events],
          ['Queued messages', usage.queuedMessages],
        ]),
        h('p', { class: 'muted' }, 'Measured ', timeEl(usage.measuredAt))),
      h('section', { 'aria-label': 'Limits' }, h('h2', null, 'Limits'), limitsTable(limits),
        h('p', { class: 'muted' }, 'Set by the platform; a call past a limit fails with RESOURCE_EXHAUSTED.'))));
}

export function limitsTable(l) {
  return table([{ title: 'Limit', cell: (r) => r[0] }, { title: 'Value', class: 'n', cell: (r) => r[1] }], [
    ['Requests per second', num(l.requestsPerSecond)],
    ['Burst', num(l.burst)],
    ['Starts per second', l.startsPerSecond ? num(l.startsPerSecond) : 'the request rate'],
    ['Starts burst', l.startsBurst ? num(l.startsBurst) : 'the burst'],
    ['Running instances', num(l.maxRunningInstances)],
    ['Payload bytes', num(l.maxPayloadBytes)],
    ['History events per execution', num(l.maxHistoryEventsPerExecution)],
  ]);
}
