// Definitions: the paged list, a definition's versions and source, and
// registering a new one with its validation errors shown by path.
import { h, replace, field, table, link, href, timeEl, bytesText, textBytes, jsonBlock, errorBox, notice, busy, ID_PATTERN } from './dom.js';
import { rpc, session } from './api.js';

const paging = { key: '', tokens: [''], index: 0 };

function registerForm() {
  const doc = h('textarea', { id: 'definition-source', rows: '14', spellcheck: 'false', class: 'code',
    placeholder: 'name: greet\nversion: "1"\nsteps:\n  - return: ${ input }' });
  const out = h('div', { id: 'register-result', 'aria-live': 'polite' });
  const submit = h('button', { type: 'submit', class: 'primary', id: 'register' }, 'Register');
  const form = h('form', { class: 'panel', 'aria-label': 'Register a definition', onsubmit: (e) => {
    e.preventDefault();
    replace(out);
    busy(submit, async () => {
      try {
        const res = await rpc('DefinitionService', 'RegisterDefinition', { document: textBytes(doc.value) });
        replace(out, notice([`${res.created ? 'Registered' : 'Already registered (identical document)'}: `,
          link(`${res.name} version ${res.version}`, ['definition', res.name], { version: res.version })]));
      } catch (err) {
        replace(out, errorBox(err, 'Not registered'));
      }
    });
  } },
  h('h2', null, 'Register a definition'),
  field('Document (YAML or JSON)', doc, 'It declares its own name and version; a registered name and version never change.'),
  h('div', { class: 'actions' }, submit), out);
  return form;
}

export async function definitionsView(container, { params }) {
  const name = params.get('name') || '';
  const key = params.toString();
  if (paging.key !== key) Object.assign(paging, { key, tokens: [''], index: 0 });
  const list = h('div', { id: 'definitions' });
  const filter = h('form', { class: 'inline', onsubmit: (e) => {
    e.preventDefault();
    location.hash = href('definitions', { name: new FormData(filter).get('name') });
  } }, field('Name', h('input', { name: 'name', value: name, pattern: ID_PATTERN })), h('button', { type: 'submit' }, 'Show versions'));
  replace(container, h('h1', null, 'Definitions'), filter, list, session.can('tenant-admin') ? registerForm() : null);
  const load = async () => {
    const page = await rpc('DefinitionService', 'ListDefinitions', { name: name || undefined, pageSize: 50, pageToken: paging.tokens[paging.index] });
    const next = page.nextPageToken || '';
    if (next) paging.tokens[paging.index + 1] = next;
    replace(list, table([
      { title: 'Name', cell: (d) => link(d.name, ['definition', d.name], { version: d.version }, { class: 'mono' }) },
      { title: 'Version', cell: (d) => h('code', null, d.version) },
      { title: 'Registered', cell: (d) => timeEl(d.createdAt) },
      { title: '', cell: (d) => link('instances', 'instances', { name: d.name }) },
    ], page.definitions || [], { empty: 'No definition registered.' }),
    h('nav', { class: 'pager', 'aria-label': 'Pages' },
      h('button', { type: 'button', disabled: paging.index === 0, onclick: () => { paging.index--; load().catch(show); } }, '← Previous'),
      h('span', { class: 'muted' }, `page ${paging.index + 1}`),
      h('button', { type: 'button', disabled: !next, onclick: () => { paging.index++; load().catch(show); } }, 'Next →')));
  };
  const show = (e) => replace(list, errorBox(e, 'Listing'));
  await load().catch(show);
}

export async function definitionView(container, { segs, params }) {
  const name = segs[0];
  const version = params.get('version') || '';
  const [{ definition: def }, versions] = await Promise.all([
    rpc('DefinitionService', 'GetDefinition', { name, version: version || undefined }),
    rpc('DefinitionService', 'ListDefinitions', { name, pageSize: 100 }),
  ]);
  replace(container,
    h('div', { class: 'page-head' }, h('h1', null, h('span', { class: 'muted' }, 'Definition '), h('span', { class: 'mono', id: 'definition-name' }, def.name), ` version ${def.version}`),
      session.can('client') ? h('a', { class: 'button', href: href('instances', { name: def.name }) }, 'Its instances') : null),
    h('p', null, 'Registered ', timeEl(def.createdAt), '. Stored as JSON, whatever the format it was registered in.'),
    h('div', { class: 'overview' },
      h('section', { 'aria-label': 'Source' }, h('h2', null, 'Source'), jsonBlock(bytesText(def.document), 'Definition source')),
      h('section', { 'aria-label': 'Versions' }, h('h2', null, 'Versions'), table([
        { title: 'Version', cell: (d) => (d.version === def.version ? h('strong', null, d.version) : link(d.version, ['definition', d.name], { version: d.version })) },
        { title: 'Registered', cell: (d) => timeEl(d.createdAt) },
      ], versions.definitions || [], { empty: 'none' }),
      versions.nextPageToken ? h('p', null, link('All versions…', 'definitions', { name: def.name })) : null)));
}
