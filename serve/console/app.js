// The weir console: a threads list, a thread's run view (graph, timeline, state diffs,
// messages, interrupt form, fork and cancel), and the fences' charts. Every byte it shows comes
// from the LangGraph Server API or /metrics (docs/console.md). Text from the server is put in
// the page as text (textContent), never as markup.

import { ApiError, blob, call, events, metricsText, onUnauthorized, setApiKey } from './api.js';
import { drawGraph } from './graph.js';
import { bars, bytes, parseMetrics, pick, sparkline } from './charts.js';

const main = document.getElementById('main');
const PAGE = 25;            // threads per page
const LIST_EVERY = 3000;    // ms between refreshes of the threads list
const THREAD_EVERY = 4000;  // ms between looks at an idle thread (another client may start a run)
const FENCES_EVERY = 2000;  // ms between reads of /metrics
const KEEP = 90;            // samples a fences chart keeps
const HISTORY = 500;        // checkpoints a thread view reads (the newest)

// --- small DOM helpers -------------------------------------------------------------------

function h(tag, attrs = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
    else if (k === 'text') e.textContent = v;
    else e.setAttribute(k, v === true ? '' : v);
  }
  for (const c of children.flat(Infinity)) if (c !== null && c !== undefined && c !== false) e.append(c);
  return e;
}

function json(v, limit = 4000) {
  const s = JSON.stringify(v, null, 2) ?? 'undefined';
  return s.length > limit ? `${s.slice(0, limit)}\n… (${s.length - limit} more characters)` : s;
}

// What a listed thread waits on: the question of its interrupt when it gives one, else "input".
function waitingOn(t) {
  if (t.status !== 'interrupted') return '';
  const first = Object.values(t.interrupts || {}).flat()[0]?.value;
  const q = first && typeof first === 'object' ? first.question : first;
  return typeof q === 'string' ? q.slice(0, 60) : 'input';
}

function ago(iso) {
  if (!iso) return '';
  const s = Math.max(0, (Date.now() - Date.parse(iso)) / 1000);
  if (s < 60) return `${Math.round(s)} s ago`;
  if (s < 3600) return `${Math.round(s / 60)} min ago`;
  if (s < 86400) return `${Math.round(s / 3600)} h ago`;
  return new Date(iso).toLocaleString();
}

function badge(status) {
  return h('span', { class: `badge ${status}`, text: status });
}

const banner = document.getElementById('banner');
function showError(e) {
  if (e && e.name === 'AbortError') return;
  banner.textContent = e instanceof ApiError ? `${e.status}: ${e.message}` : String(e && e.message || e);
  banner.hidden = false;
}
function clearError() { banner.hidden = true; }

// --- the key ------------------------------------------------------------------------------

const keyDialog = document.getElementById('key-dialog');
// The dialog says why it is back: a key was given and refused, or none was given yet.
onUnauthorized((message, hadKey) => {
  document.getElementById('key-why').textContent =
    hadKey ? `The key given was refused: ${message}` : '';
  if (!keyDialog.open) keyDialog.showModal();
});
document.getElementById('key-form').addEventListener('submit', () => {
  setApiKey(document.getElementById('key-input').value);
  route();
});

// --- a view's life: its timers and streams end when the user leaves it --------------------

class Life {
  constructor() { this.alive = true; this.abort = new AbortController(); this.timers = new Set(); }
  end() {
    this.alive = false;
    this.abort.abort();
    for (const t of this.timers) clearTimeout(t);
  }
  // Runs fn now and then `ms` after each call finished: one request at a time, never a pile.
  every(ms, fn) {
    const tick = async () => {
      if (!this.alive) return;
      if (!document.hidden) {
        try { await fn(); } catch (e) { if (this.alive) showError(e); }
      }
      if (!this.alive) return;
      const t = setTimeout(() => { this.timers.delete(t); tick(); }, ms);
      this.timers.add(t);
    };
    return tick();
  }
}

let life = new Life();

// --- routing ------------------------------------------------------------------------------

function parseHash() {
  const raw = location.hash.replace(/^#/, '') || '/';
  const [path, query = ''] = raw.split('?');
  return { path, params: new URLSearchParams(query) };
}

function route() {
  life.end();
  life = new Life();
  clearError();
  const { path, params } = parseHash();
  document.getElementById('nav-threads').toggleAttribute('aria-current', !path.startsWith('/fences'));
  document.getElementById('nav-fences').toggleAttribute('aria-current', path.startsWith('/fences'));
  main.replaceChildren();
  if (path.startsWith('/thread/')) threadView(decodeURIComponent(path.slice('/thread/'.length)), life);
  else if (path.startsWith('/fences')) fencesView(life);
  else threadsView(params, life);
}

window.addEventListener('hashchange', route);

// --- assistants (the workflows the server runs) -------------------------------------------

let assistants = null;
async function loadAssistants() {
  if (assistants) return assistants;
  try {
    const { data } = await call('POST', '/assistants/search', { limit: 1000 });
    assistants = data.map(a => a.graph_id).sort();
  } catch (e) {
    if (e instanceof ApiError && e.status === 404) assistants = [];  // no --workflows
    else throw e;
  }
  return assistants;
}

// --- threads list -------------------------------------------------------------------------

async function threadsView(params, life) {
  const status = params.get('status') || '';
  const graph = params.get('graph') || '';
  const offset = Math.max(0, Number(params.get('offset')) || 0);
  const link = (o) => {
    const q = new URLSearchParams();
    if (o.status ?? status) q.set('status', o.status ?? status);
    if (o.graph ?? graph) q.set('graph', o.graph ?? graph);
    if (o.offset) q.set('offset', o.offset);
    return `#/?${q}`;
  };
  let names;
  try { names = await loadAssistants(); } catch (e) { showError(e); return; }
  if (!life.alive) return;
  if (!names.length) {
    main.append(h('section', { class: 'card' }, h('h1', { text: 'Threads' }),
      h('p', { text: 'This server runs no workflows: start weir serve with --workflows DIR to see runs here. The Fences view works without.' })));
    return;
  }
  // Start a run.
  const startGraph = h('select', { id: 'start-graph' }, names.map(n => h('option', { value: n, text: n })));
  if (graph) startGraph.value = graph;
  const startInput = h('textarea', { id: 'start-input', rows: 3, spellcheck: 'false', 'aria-describedby': 'start-error' });
  const startError = h('p', { id: 'start-error', class: 'error', 'aria-live': 'polite' });
  const startButton = h('button', { type: 'submit', id: 'start-run', text: 'Start run' });
  const checkStart = () => {
    try {
      const v = JSON.parse(startInput.value || '{}');
      if (!v || typeof v !== 'object' || Array.isArray(v)) throw new Error('the input must be a JSON object');
      startError.textContent = '';
      startButton.disabled = false;
      return v;
    } catch (e) {
      startError.textContent = `input: ${e.message}`;
      startButton.disabled = true;
      return null;
    }
  };
  // The picked assistant's input keys as a template, unless the user typed while they loaded
  // (their input is kept: a slow server answered after it, and overwrote it).
  const prefill = async () => {
    const before = startInput.value;
    try {
      const { data } = await call('GET', `/assistants/${encodeURIComponent(startGraph.value)}/schemas`);
      const keys = Object.keys(data.input_schema?.properties || {});
      if (startInput.value === before)
        startInput.value = JSON.stringify(Object.fromEntries(keys.map(k => [k, ''])));
    } catch (e) { showError(e); }
    checkStart();
  };
  startGraph.addEventListener('change', prefill);
  startInput.addEventListener('input', checkStart);
  const startForm = h('form', { class: 'card start', 'aria-labelledby': 'start-title' },
    h('h2', { id: 'start-title', text: 'Start a run' }),
    h('div', { class: 'row' },
      h('label', { for: 'start-graph', text: 'Assistant' }), startGraph,
      h('label', { for: 'start-input', text: 'Input (JSON)' }), startInput, startButton),
    startError);
  startForm.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    const input = checkStart();
    if (!input) return;
    startButton.disabled = true;
    try {
      const { data: t } = await call('POST', '/threads', { metadata: { graph_id: startGraph.value } });
      const { data: r } = await call('POST', `/threads/${t.thread_id}/runs`, { assistant_id: startGraph.value, input });
      location.hash = `#/thread/${encodeURIComponent(t.thread_id)}?run=${encodeURIComponent(r.run_id)}`;
    } catch (e) { showError(e); startButton.disabled = false; }
  });
  prefill();

  // Filters and the list.
  const statusSel = h('select', { id: 'filter-status' },
    ['', 'busy', 'interrupted', 'idle', 'error'].map(s => h('option', { value: s, text: s || 'any status' })));
  statusSel.value = status;
  const graphSel = h('select', { id: 'filter-graph' },
    h('option', { value: '', text: 'any assistant' }), names.map(n => h('option', { value: n, text: n })));
  graphSel.value = graph;
  statusSel.addEventListener('change', () => { location.hash = link({ status: statusSel.value, offset: 0 }); });
  graphSel.addEventListener('change', () => { location.hash = link({ graph: graphSel.value, offset: 0 }); });
  const count = h('span', { id: 'thread-count', class: 'muted', 'aria-live': 'polite' });
  const body = h('tbody');
  const prev = h('a', { href: link({ offset: Math.max(0, offset - PAGE) }), class: 'button', text: '← Newer' });
  const next = h('a', { href: link({ offset: offset + PAGE }), class: 'button', text: 'Older →' });
  const table = h('table', { id: 'threads', class: 'list' },
    h('caption', { class: 'sr-only', text: 'threads, most recently updated first' }),
    h('thead', {}, h('tr', {}, ['Thread', 'Assistant', 'Status', 'Updated', 'Waiting on'].map(c => h('th', { scope: 'col', text: c })))),
    body);
  main.append(startForm, h('section', { class: 'card' },
    h('div', { class: 'row spread' }, h('h1', { text: 'Threads' }),
      h('div', { class: 'row' }, h('label', { for: 'filter-status', text: 'Status' }), statusSel,
        h('label', { for: 'filter-graph', text: 'Assistant' }), graphSel, count)),
    table, h('div', { class: 'row pager' }, prev, next)));

  // One request per refresh, whatever the number of threads: a page of them.
  await life.every(LIST_EVERY, async () => {
    const q = { limit: PAGE, offset, sort_by: 'updated_at', sort_order: 'desc' };
    if (status) q.status = status;
    if (graph) q.metadata = { graph_id: graph };
    const { data, total } = await call('POST', '/threads/search', q);
    if (!life.alive) return;
    count.textContent = `${total ?? data.length} thread${total === 1 ? '' : 's'}`;
    prev.toggleAttribute('hidden', offset === 0);
    next.toggleAttribute('hidden', total === null || offset + PAGE >= total);
    body.replaceChildren(...data.map(t => h('tr', { 'data-thread': t.thread_id },
      h('td', {}, h('a', { href: `#/thread/${encodeURIComponent(t.thread_id)}`, class: 'mono', text: t.thread_id.slice(0, 8) })),
      h('td', { text: t.metadata?.graph_id || '' }),
      h('td', {}, badge(t.status)),
      h('td', { text: ago(t.updated_at), title: t.updated_at }),
      h('td', { text: waitingOn(t) }))));
    if (!data.length) body.append(h('tr', {}, h('td', { colspan: 5, class: 'muted', text: 'No threads yet: start a run above.' })));
  });
}

// --- a thread and its runs ----------------------------------------------------------------

// The nodes that ran to make checkpoint `c`: its parent's `next` (none for the input, a fork
// or a state update, which no node made).
function ranAt(c, byId) {
  if (c.metadata?.source && c.metadata.source !== 'loop') return [];
  const parent = c.parent_checkpoint && byId.get(c.parent_checkpoint.checkpoint_id);
  return parent ? parent.next || [] : [];
}

// What changed from `before` to `after`, per key: [{key, kind, before, after}].
function diff(before, after) {
  const rows = [];
  const keys = [...new Set([...Object.keys(before || {}), ...Object.keys(after || {})])].sort();
  for (const k of keys) {
    const a = before?.[k], b = after?.[k];
    const inA = before && k in before, inB = after && k in after;
    if (inA && inB && JSON.stringify(a) === JSON.stringify(b)) continue;
    if (!inA) rows.push({ key: k, kind: 'added', after: b });
    else if (!inB) rows.push({ key: k, kind: 'removed', before: a });
    else if (Array.isArray(a) && Array.isArray(b) && b.length > a.length &&
             JSON.stringify(b.slice(0, a.length)) === JSON.stringify(a))
      rows.push({ key: k, kind: 'appended', after: b.slice(a.length) });
    else rows.push({ key: k, kind: 'changed', before: a, after: b });
  }
  return rows;
}

function isArtifact(v) { return v && typeof v === 'object' && typeof v.$artifact === 'string'; }

// Saves an artifact of `thread` (GET /threads/{id}/artifacts/{artifact_id}) as a file.
async function download(thread, id, button) {
  button.disabled = true;
  try {
    const data = await blob(`/threads/${encodeURIComponent(thread)}/artifacts/${encodeURIComponent(id)}`);
    const url = URL.createObjectURL(data);
    const a = h('a', { href: url, download: `artifact-${id.slice(0, 16)}` });
    document.body.append(a);
    a.click();
    a.remove();
    setTimeout(() => URL.revokeObjectURL(url), 60000);
    button.textContent = `Downloaded (${bytes(data.size)})`;
  } catch (e) {
    button.textContent = `Download failed: ${e.message}`;
  } finally {
    button.disabled = false;
  }
}

// A state value; an artifact reference shows its id, size, kind, the first KB of its preview
// and (given the thread it belongs to) a download button.
function valueView(v, thread) {
  if (isArtifact(v)) {
    const get = thread ? h('button', { type: 'button', class: 'download', 'data-artifact': v.$artifact, text: 'Download',
      onclick: (e) => download(thread, v.$artifact, e.currentTarget) }) : null;
    return h('span', { class: 'artifact' }, h('strong', { text: 'artifact ' }), h('code', { text: v.$artifact }),
      h('span', { text: ` ${bytes(v.bytes)}${v.media_type ? `, ${v.media_type}` : ''} ` }), get,
      v.preview ? h('pre', { text: String(v.preview).slice(0, 1024) }) : null);
  }
  return h('pre', { text: json(v) });
}

function isMessage(m) { return m && typeof m === 'object' && ['human', 'ai', 'tool', 'system'].includes(m.type); }

function messagesOf(values) {
  for (const v of Object.values(values || {})) if (Array.isArray(v) && v.length && v.every(isMessage)) return v;
  return [];
}

function text(content) {
  if (typeof content === 'string') return content;
  if (Array.isArray(content)) return content.map(p => (p && p.text) || '').join('');
  return JSON.stringify(content);
}

async function threadView(id, life) {
  const enc = encodeURIComponent(id);
  const ui = {
    title: h('h1', {}, 'Thread ', h('span', { class: 'mono', text: id })),
    status: h('span', { id: 'thread-status', 'aria-live': 'polite' }),
    graphName: h('span', { class: 'muted' }),
    cancel: h('button', { id: 'cancel-run', type: 'button', hidden: true, text: 'Cancel run' }),
    graph: h('div', { id: 'graph', class: 'graph-host' }),
    live: h('p', { id: 'live', class: 'muted', 'aria-live': 'polite' }),
    steer: h('section', { id: 'interrupt', class: 'card steer', hidden: true }),
    runs: h('tbody'),
    timeline: h('ol', { id: 'timeline', class: 'timeline' }),
    step: h('section', { id: 'step', class: 'card' }),
    chat: h('div', { id: 'messages', class: 'chat' }),
  };
  main.append(
    h('div', { class: 'row spread' },
      h('div', { class: 'row' }, h('a', { href: '#/', text: '← Threads' }), ui.title, ui.status, ui.graphName),
      ui.cancel),
    h('div', { class: 'split' },
      h('div', { class: 'col' },
        h('section', { class: 'card' }, h('h2', { text: 'Graph' }), ui.graph, ui.live,
          h('p', { class: 'legend muted' }, h('span', { class: 'key running', text: 'running now' }),
            h('span', { class: 'key waiting', text: 'waiting for input' }), h('span', { class: 'key visited', text: 'visited (×count)' }),
            h('span', { text: 'dashed: a route' }))),
        ui.steer,
        h('section', { class: 'card' }, h('h2', { text: 'Runs' }),
          h('table', { id: 'runs', class: 'list' },
            h('thead', {}, h('tr', {}, ['Run', 'Status', 'Started', 'Updated'].map(c => h('th', { scope: 'col', text: c })))),
            ui.runs))),
      h('div', { class: 'col' },
        h('section', { class: 'card' }, h('h2', { text: 'Steps' }),
          h('p', { class: 'muted', text: 'Each step of the thread, oldest first: the nodes that ran, when, and what they changed. Pick one to see its state; fork to run again from it.' }),
          ui.timeline),
        ui.step,
        h('section', { class: 'card' }, h('h2', { text: 'Messages' }), ui.chat))));

  const s = {
    thread: null, graph: null, graphId: '', history: [], runs: [],
    running: new Set(), selected: null, following: null, lastSeen: '',
    // Replies being generated (the stream's AIMessageChunk pieces), by message id, until the
    // step that writes them lands in the history.
    typing: new Map(),
  };

  const byId = () => new Map(s.history.map(c => [c.checkpoint.checkpoint_id, c]));
  // ranAt, and for a thread's first checkpoint past step 0 (a run without input checkpoints
  // none of its own), the nodes the graph starts with.
  const ran = (c, m) => {
    const r = ranAt(c, m);
    if (r.length || c.parent_checkpoint || !(c.metadata?.step > 0) || !s.graph) return r;
    return s.graph.edges.filter(e => e.source === '__start__').map(e => e.target);
  };

  // The current branch: the newest checkpoint and its parents (a fork leaves the older branch
  // in the history, off it).
  const branch = () => {
    const m = byId();
    const seen = new Set();
    let c = s.history[0];
    while (c && !seen.has(c.checkpoint.checkpoint_id)) {
      seen.add(c.checkpoint.checkpoint_id);
      c = c.parent_checkpoint && m.get(c.parent_checkpoint.checkpoint_id);
    }
    return seen;
  };

  const visits = () => {
    const m = byId();
    const counts = new Map();
    for (const id of branch()) for (const n of ran(m.get(id), m)) counts.set(n, (counts.get(n) || 0) + 1);
    if (s.history.length) counts.set('__start__', 1);
    const latest = s.history[0];
    if (latest && !latest.next?.length && s.thread?.status === 'idle') counts.set('__end__', 1);
    return counts;
  };

  // Thread.interrupts is keyed by task id, as LangGraph keys it; the latest state's tasks name
  // the node of each.
  const nodeOf = (task) => (s.history[0]?.tasks || []).find(x => x.id === task)?.name || task;
  const waiting = () => new Set(s.thread?.status === 'interrupted' ? Object.keys(s.thread.interrupts || {}).map(nodeOf) : []);

  const renderGraph = () => {
    if (!s.graph) {
      if (s.graphNote) ui.graph.replaceChildren(h('p', { class: 'note', text: s.graphNote }));
      return;
    }
    drawGraph(ui.graph, s.graph, { running: s.running, waiting: waiting(), visits: visits() });
    ui.live.textContent = s.running.size ? `running now: ${[...s.running].join(', ')}`
      : waiting().size ? `waiting for input at ${[...waiting()].join(', ')}` : '';
  };

  const renderHeader = () => {
    const t = s.thread;
    ui.status.replaceChildren(badge(t.status));
    const name = t.metadata?.graph_id || s.graphId;
    ui.graphName.textContent = name ? `assistant ${name}` : '';
    const active = s.runs.find(r => r.status === 'pending' || r.status === 'running');
    ui.cancel.hidden = !active;
    ui.cancel.dataset.run = active ? active.run_id : '';
  };

  const renderRuns = () => {
    ui.runs.replaceChildren(...s.runs.map(r => h('tr', { 'data-run': r.run_id },
      h('td', { class: 'mono', text: r.run_id }), h('td', {}, badge(r.status)),
      h('td', { text: ago(r.created_at), title: r.created_at }), h('td', { text: ago(r.updated_at), title: r.updated_at }))));
    if (!s.runs.length) ui.runs.append(h('tr', {}, h('td', { colspan: 4, class: 'muted', text: 'no runs on this thread yet' })));
  };

  // The fences that acted in a step (its checkpoint's metadata "fences"): a short badge and the
  // sentence that says what the fence did and why.
  const fencesOf = (c) => (Array.isArray(c.metadata?.fences) ? c.metadata.fences : []);
  const fenceBadge = (f) => f.fence === 'window_eviction' ? `window −${f.evicted_messages}`
    : f.fence === 'artifact_offload' ? `artifact ${bytes(f.bytes)}`
    : f.fence === 'admission_wait' ? `waited ${f.wait_ms} ms` : String(f.fence);
  const fenceText = (f) => f.fence === 'window_eviction'
    ? `${f.channel}: the window evicted ${f.evicted_messages} message${f.evicted_messages === 1 ? '' : 's'} (the channel's max_messages / max_tokens)`
    : f.fence === 'artifact_offload'
      ? `${f.channel}${f.node ? ` (from ${f.node})` : ' (input)'}: ${bytes(f.bytes)} moved to the artifact store (over the workflow's inline_limit); state holds artifact ${f.artifact}`
    : f.fence === 'admission_wait'
      ? `the run waited ${f.wait_ms} ms for a run slot (admission: the server's runs at once)`
      : JSON.stringify(f);

  const renderStep = () => {
    const m = byId();
    const c = s.selected && m.get(s.selected);
    if (!c) { ui.step.replaceChildren(h('h2', { text: 'State' }), h('p', { class: 'muted', text: 'Pick a step to see what it changed.' })); return; }
    const parent = c.parent_checkpoint && m.get(c.parent_checkpoint.checkpoint_id);
    const rows = diff(parent ? parent.values : {}, c.values);
    ui.step.replaceChildren(
      h('h2', { text: `Step ${c.metadata?.step ?? '?'}: what changed` }),
      h('p', { class: 'muted mono', text: c.checkpoint.checkpoint_id }),
      fencesOf(c).length ? h('div', { class: 'fences' }, h('h3', { text: 'Fences that acted' }),
        h('ul', {}, fencesOf(c).map(f => h('li', { 'data-fence': f.fence, text: fenceText(f) })))) : null,
      rows.length ? h('dl', { class: 'diff' }, rows.map(r => [
        h('dt', { class: r.kind }, h('span', { class: 'sign', text: { added: '+', removed: '−', appended: '+', changed: '~' }[r.kind] }),
          ` ${r.key} `, h('span', { class: 'muted', text: r.kind })),
        h('dd', {}, r.kind === 'changed' ? h('div', { class: 'change' }, h('div', { class: 'was' }, valueView(r.before, s.thread?.thread_id)), h('div', { class: 'now' }, valueView(r.after, s.thread?.thread_id)))
          : valueView(r.kind === 'removed' ? r.before : r.after, s.thread?.thread_id)),
      ])) : h('p', { class: 'muted', text: 'nothing changed in the state' }),
      h('details', {}, h('summary', { text: 'the whole state after this step' }), h('pre', { text: json(c.values, 20000) })));
  };

  const renderTimeline = () => {
    const m = byId();
    const on = branch();
    const items = [...s.history].reverse();
    ui.timeline.replaceChildren(...items.map((c, i) => {
      const id = c.checkpoint.checkpoint_id;
      const prev = c.parent_checkpoint && m.get(c.parent_checkpoint.checkpoint_id);
      const ms = prev && c.created_at && prev.created_at ? Date.parse(c.created_at) - Date.parse(prev.created_at) : null;
      const nodes = ran(c, m);
      const parent = prev ? prev.values : {};
      const changed = diff(parent, c.values).map(r => r.key);
      const interrupted = (c.interrupts || []).length > 0;
      const source = c.metadata?.source;
      const label = nodes.length ? nodes.join(' + ')
        : source === 'fork' ? `fork of #${prev?.metadata?.step ?? '?'}`
        : source === 'update' ? 'state update'
        : source === 'loop' || source === 'input' || !prev ? 'input' : source || 'update';
      const pick = h('button', {
        type: 'button', class: 'step-pick', 'aria-pressed': String(s.selected === id),
        onclick: () => { s.selected = id; renderTimeline(); renderStep(); },
      },
      h('span', { class: 'step-n', text: `#${c.metadata?.step ?? i}` }),
      h('span', { class: 'step-node', text: label }),
      interrupted ? h('span', { class: 'badge interrupted', text: 'interrupt' }) : null,
      fencesOf(c).map(f => h('span', { class: 'badge fence', 'data-fence': f.fence, title: fenceText(f), text: fenceBadge(f) })),
      h('span', { class: 'muted', text: changed.length ? `changed ${changed.join(', ')}` : 'no change' }),
      ms !== null ? h('span', { class: 'muted step-ms', text: ms < 1 ? '<1 ms' : `${ms} ms` }) : null);
      const fork = h('button', {
        type: 'button', class: 'fork', 'data-checkpoint': id,
        'aria-label': `fork from step ${c.metadata?.step ?? i}`, text: 'Fork from here',
        disabled: !s.graphId || Boolean(s.following),
        onclick: () => startRun({ checkpoint_id: id }),
      });
      const cls = [s.selected === id ? 'selected' : '', on.has(id) ? '' : 'off-branch'].join(' ').trim();
      return h('li', { class: cls || null, 'data-step': c.metadata?.step ?? i, 'data-checkpoint': id,
        title: on.has(id) ? null : 'on an earlier branch (before a fork)' }, pick, fork);
    }));
    if (!items.length) ui.timeline.append(h('li', { class: 'muted', text: 'no steps yet' }));
  };

  const renderChat = () => {
    const landed = messagesOf(s.history[0]?.values);
    const ids = new Set(landed.map(m => m.id));
    for (const id of [...s.typing.keys()]) if (ids.has(id)) s.typing.delete(id);
    const msgs = landed.concat([...s.typing.values()]);
    ui.chat.replaceChildren(...msgs.map(m => h('div', { class: `msg ${m.type}${m.typing ? ' typing' : ''}`, 'data-id': m.id || null, 'aria-busy': m.typing ? 'true' : null },
      h('div', { class: 'who', text: m.type === 'human' ? 'user' : m.type === 'ai' ? (m.name || 'assistant') : m.type === 'tool' ? `tool ${m.name || ''}` : 'system' }),
      h('div', { class: 'what', text: text(m.content) }),
      (m.tool_calls || []).map(tc => h('pre', { class: 'call', text: `${tc.name}(${JSON.stringify(tc.args)})` })))));
    if (!msgs.length) ui.chat.append(h('p', { class: 'muted', text: 'This thread\'s state has no messages. (An llm node\'s reply appears as it is generated; other messages when their step lands.)' }));
  };
  // Pieces come faster than a screen shows them: one render a frame.
  let chatQueued = false;
  const renderChatSoon = () => {
    if (chatQueued) return;
    chatQueued = true;
    requestAnimationFrame(() => { chatQueued = false; if (life.alive) renderChat(); });
  };

  const renderSteer = () => {
    const t = s.thread;
    const ints = Object.entries(t.status === 'interrupted' ? t.interrupts || {} : {});
    if (!ints.length || s.following) { ui.steer.hidden = true; ui.steer.replaceChildren(); return; }
    const [task, list] = ints[0];
    const node = nodeOf(task);
    const value = list[0]?.value;
    const area = h('textarea', { id: 'resume-value', rows: 3, spellcheck: 'false', 'aria-describedby': 'resume-error', placeholder: '"approve"' });
    const err = h('p', { id: 'resume-error', class: 'error', 'aria-live': 'polite' });
    const send = h('button', { type: 'submit', id: 'resume-send', text: 'Resume', disabled: true });
    const check = () => {
      if (!area.value.trim()) { err.textContent = 'write the value to resume with, as JSON'; send.disabled = true; return undefined; }
      try {
        const v = JSON.parse(area.value);
        err.textContent = '';
        send.disabled = false;
        return v;
      } catch (e) {
        err.textContent = `not JSON (${e.message}); text needs quotes: "approve"`;
        send.disabled = true;
        return undefined;
      }
    };
    area.addEventListener('input', check);
    const form = h('form', {}, h('label', { for: 'resume-value', text: 'Resume with (JSON)' }), area, err, h('div', { class: 'row' }, send));
    form.addEventListener('submit', (ev) => {
      ev.preventDefault();
      const v = check();
      if (v === undefined) return;
      send.disabled = true;
      startRun({ command: { resume: v } });
    });
    ui.steer.replaceChildren(h('h2', { text: `Waiting for you at ${node}` }),
      h('pre', { id: 'interrupt-payload', text: json(value) }), form);
    ui.steer.hidden = false;
  };

  const renderAll = () => { renderHeader(); renderGraph(); renderRuns(); renderTimeline(); renderStep(); renderChat(); renderSteer(); };

  // Everything about the thread, in three requests (and the graph once).
  const load = async () => {
    const { data: t } = await call('GET', `/threads/${enc}`);
    const { data: hist } = await call('POST', `/threads/${enc}/history`, { limit: HISTORY });
    const { data: runs } = await call('GET', `/threads/${enc}/runs`);
    if (!life.alive) return;
    s.thread = t;
    s.history = hist.filter(c => c.checkpoint.checkpoint_id !== 'root');  // the state before the first
    s.runs = runs;
    s.lastSeen = `${t.status} ${t.updated_at}`;
    // The graph of the assistant the thread's newest run used (metadata.graph_id is the client's
    // to change): one this server does not run leaves the view without its picture, nothing else.
    const gid = runs[0]?.assistant_id || t.metadata?.graph_id || '';
    if (gid && (gid !== s.graphId || (!s.graph && !s.graphNote))) {
      s.graphId = gid;
      try {
        s.graph = (await call('GET', `/assistants/${encodeURIComponent(gid)}/graph`)).data;
        s.graphNote = '';
      } catch (e) {
        s.graph = null;
        s.graphNote = `no graph to draw: ${e.message}`;
      }
      if (!life.alive) return;
    }
    if (!s.selected || !byId().has(s.selected)) s.selected = hist[0]?.checkpoint.checkpoint_id || null;
    renderAll();
  };

  // A run's events, one stream while it runs: the node running now, each step as it lands.
  const follow = async (runId) => {
    if (s.following === runId || !life.alive) return;
    s.following = runId;
    s.running = new Set();
    renderSteer();
    renderTimeline();
    const modes = ['values', 'updates', 'tasks', 'checkpoints', 'messages-tuple'].map(m => `stream_mode=${m}`).join('&');
    try {
      for await (const ev of events(`/threads/${enc}/runs/${encodeURIComponent(runId)}/stream?${modes}`, life.abort.signal)) {
        if (!life.alive) return;
        if (ev.event === 'tasks' && ev.data && ev.data.name) {
          if ('result' in ev.data) s.running.delete(ev.data.name); else s.running.add(ev.data.name);
          renderGraph();
        } else if (ev.event === 'checkpoints' && ev.data?.config) {
          const c = {
            values: ev.data.values, next: ev.data.next, tasks: ev.data.tasks, metadata: ev.data.metadata,
            created_at: new Date().toISOString(), interrupts: [],
            checkpoint: ev.data.config.configurable,
            parent_checkpoint: ev.data.parent_config ? ev.data.parent_config.configurable : null,
          };
          const known = byId();
          if (!known.has(c.checkpoint.checkpoint_id)) s.history.unshift(c);
          if (c.parent_checkpoint && !known.has(c.parent_checkpoint.checkpoint_id)) {
            // Steps the view missed (the run moved on between the view's read and the stream):
            // the history once more, with them.
            const { data } = await call('POST', `/threads/${enc}/history`, { limit: HISTORY });
            if (!life.alive) return;
            s.history = data.filter(c => c.checkpoint.checkpoint_id !== 'root');
          }
          s.selected = c.checkpoint.checkpoint_id;
          renderGraph(); renderTimeline(); renderStep(); renderChat();
        } else if (ev.event === 'messages' && ev.data?.[0]?.type === 'AIMessageChunk') {
          const [piece, meta] = ev.data;
          const m = s.typing.get(piece.id) || { type: 'ai', id: piece.id, name: meta?.langgraph_node, content: '', typing: true };
          m.content += typeof piece.content === 'string' ? piece.content : '';
          s.typing.set(piece.id, m);
          renderChatSoon();
        } else if (ev.event === 'error') {
          showError(new Error(`the run failed: ${ev.data?.error}: ${ev.data?.message}`));
        }
      }
    } catch (e) {
      if (e.name !== 'AbortError') showError(e);
      if (!life.alive) return;
    }
    s.following = null;
    s.running = new Set();
    s.typing.clear();
    await load();
    const active = s.runs.find(r => r.status === 'pending' || r.status === 'running');
    if (active) follow(active.run_id);
  };

  const startRun = async (fields) => {
    try {
      const { data: r } = await call('POST', `/threads/${enc}/runs`, { assistant_id: s.graphId, ...fields });
      s.runs.unshift(r);
      renderRuns();
      follow(r.run_id);
    } catch (e) { showError(e); await load(); }
  };

  ui.cancel.addEventListener('click', async () => {
    const run = ui.cancel.dataset.run;
    if (!run) return;
    ui.cancel.disabled = true;
    try { await call('POST', `/threads/${enc}/runs/${encodeURIComponent(run)}/cancel`); } catch (e) { showError(e); }
    ui.cancel.disabled = false;
  });

  try { await load(); } catch (e) { showError(e); return; }
  const first = parseHash().params.get('run');
  const active = s.runs.find(r => r.status === 'pending' || r.status === 'running') ||
    (first && s.runs.find(r => r.run_id === first && r.status !== 'success'));
  if (active) follow(active.run_id);
  // While no run is followed, one look at the thread now and then: another client may start one.
  life.every(THREAD_EVERY, async () => {
    if (s.following) return;
    const { data: t } = await call('GET', `/threads/${enc}`);
    if (!life.alive || s.following || `${t.status} ${t.updated_at}` === s.lastSeen) return;
    await load();
    const a = s.runs.find(r => r.status === 'pending' || r.status === 'running');
    if (a) follow(a.run_id);
  });
}

// --- the fences ---------------------------------------------------------------------------

function fencesView(life) {
  const card = (id, title, about) => {
    const body = h('div', { id, class: 'chart-host' });
    return [h('section', { class: 'card fence' }, h('h2', { text: title }), h('p', { class: 'muted', text: about }), body), body];
  };
  const [memCard, mem] = card('chart-memory', 'Memory budget', 'Bytes reserved in the server\'s one memory budget, by category, against the category\'s limit (the line). A reservation that does not fit waits or is refused; it never overcommits.');
  const [runsCard, runs] = card('chart-runs', 'Runs', 'Runs running and queued (weir_runs in /metrics; with --db, threads with a run: POST /threads/count, status busy) and threads waiting at an interrupt. Admission runs --max-runs at once and queues --max-queued-runs more; beyond, 429.');
  const [refusedCard, refused] = card('chart-refused', 'Refused at the door', 'Responses per interval that a fence gave: 429 (a full queue), 503 (memory for requests, shutting down), 413 (a body over its cap).');
  const [reqCard, req] = card('chart-requests', 'Model requests', 'Generation requests running and waiting for a slot, per model (--max-num-seqs, --max-queued-requests).');
  const [kvCard, kv] = card('chart-kv', 'KV cache', 'The paged KV cache of each model: blocks used, cached (reusable prefixes) and free; the prefix-cache hit ratio and preemptions.');
  const stamp = h('p', { id: 'fences-updated', class: 'muted', 'aria-live': 'off' });
  main.append(h('div', { class: 'row spread' }, h('h1', { text: 'Fences' }), stamp),
    h('div', { class: 'grid' }, memCard, runsCard, refusedCard, reqCard, kvCard));
  const hist = { busy: [], interrupted: [], runs_running: [], runs_queued: [], r429: [], r503: [], r413: [], running: [], waiting: [] };
  const push = (k, v) => { hist[k].push(v); if (hist[k].length > KEEP) hist[k].shift(); };
  let last = null;
  let haveRuns = null;

  life.every(FENCES_EVERY, async () => {
    const samples = parseMetrics(await metricsText());
    if (!life.alive) return;
    const limits = new Map(pick(samples, 'weir_memory_limit_bytes').map(s => [s.labels.category, s.value]));
    bars(mem, pick(samples, 'weir_memory_used_bytes').map(s => {
      const limit = limits.get(s.labels.category) ?? null;
      return { label: s.labels.category, value: s.value, limit,
        text: limit ? `${bytes(s.value)} of ${bytes(limit)}` : `${bytes(s.value)} (no limit of its own)` };
    }));
    const status = (label) => pick(samples, 'weir_serve_http_responses_total', { status: label })[0]?.value ?? 0;
    const now = { r429: status('429'), r503: status('503'), r413: status('413') };
    for (const k of Object.keys(now)) push(k, last ? Math.max(0, now[k] - last[k]) : 0);
    last = now;
    sparkline(refused, [{ label: '429', values: hist.r429, cls: 'hot' }, { label: '503', values: hist.r503, cls: 'warn' }, { label: '413', values: hist.r413 }]);
    const running = pick(samples, 'weir_serve_requests_running'), waiting = pick(samples, 'weir_serve_requests_waiting');
    if (running.length) {
      push('running', running.reduce((a, s) => a + s.value, 0));
      push('waiting', waiting.reduce((a, s) => a + s.value, 0));
      sparkline(req, [{ label: 'running', values: hist.running }, { label: 'waiting', values: hist.waiting, cls: 'warn' }]);
    } else req.replaceChildren(h('p', { class: 'muted', text: 'No model is loaded (weir serve --model FILE serves one).' }));
    const engines = [...new Set(pick(samples, 'weir_kv_blocks_used').map(s => s.labels.engine))];
    if (engines.length) {
      const rows = [];
      for (const e of engines) {
        const get = (n) => pick(samples, n, { engine: e })[0]?.value ?? 0;
        const used = get('weir_kv_blocks_used'), free = get('weir_kv_blocks_free'), cached = get('weir_kv_blocks_cached');
        rows.push({ label: e, value: used, limit: used + free + cached || null,
          text: `${used} used, ${cached} cached, ${free} free of ${used + free + cached} blocks; prefix hits ${(get('weir_prefix_cache_hit_ratio') * 100).toFixed(0)}%, preemptions ${get('weir_engine_preemptions')}` });
      }
      bars(kv, rows);
    } else kv.replaceChildren(h('p', { class: 'muted', text: 'No model is loaded: the KV cache appears with one (weir serve --model FILE).' }));
    if (haveRuns === null) haveRuns = (await loadAssistants()).length > 0;
    if (haveRuns) {
      // The run service's own counts when /metrics has them (in-process: weir_runs{state}),
      // else the threads with a run (PostgreSQL).
      const counted = pick(samples, 'weir_runs');
      const state = (name) => counted.find(s => s.labels.state === name)?.value ?? 0;
      const busy = counted.length ? null : (await call('POST', '/threads/count', { status: 'busy' })).data;
      const paused = (await call('POST', '/threads/count', { status: 'interrupted' })).data;
      if (!life.alive) return;
      push('interrupted', Number(paused) || 0);
      if (counted.length) {
        push('runs_running', state('running'));
        push('runs_queued', state('queued') + state('pending'));
        sparkline(runs, [{ label: 'running', values: hist.runs_running }, { label: 'queued', values: hist.runs_queued, cls: 'hot' },
          { label: 'interrupted', values: hist.interrupted, cls: 'warn' }]);
      } else {
        push('busy', Number(busy) || 0);
        sparkline(runs, [{ label: 'busy', values: hist.busy }, { label: 'interrupted', values: hist.interrupted, cls: 'warn' }]);
      }
    } else runs.replaceChildren(h('p', { class: 'muted', text: 'This server runs no workflows (--workflows DIR).' }));
    stamp.textContent = `updated ${new Date().toLocaleTimeString()}, every ${FENCES_EVERY / 1000} s`;
  });
}

// --- start --------------------------------------------------------------------------------

document.getElementById('server').textContent = location.host;
route();
