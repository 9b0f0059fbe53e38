// The graph of GET /assistants/{id}/graph, laid out in layers and drawn as SVG.
// Why a small layered layout here and not a library or the server: docs/architecture.md,
// "The console's graph layout". weir's graphs have a handful to a few dozen nodes, so a
// longest-path layering with a few barycentre sweeps is instant and reads top to bottom.

const NS = 'http://www.w3.org/2000/svg';
const W = 132, H = 34, GAP_X = 36, GAP_Y = 56, PAD = 28;

function svg(tag, attrs = {}, ...children) {
  const e = document.createElementNS(NS, tag);
  for (const [k, v] of Object.entries(attrs)) if (v !== undefined && v !== null) e.setAttribute(k, v);
  for (const c of children) e.append(c);
  return e;
}

// {pos: Map id -> {x, y, layer}, back: Set of "a->b" drawn as loops, width, height}
export function layout(nodes, edges) {
  const ids = nodes.map(n => n.id);
  const out = new Map(ids.map(id => [id, []]));
  for (const e of edges) if (out.has(e.source) && out.has(e.target)) out.get(e.source).push(e.target);
  // Back edges: those closing a cycle in a depth-first walk from __start__ (then any node left).
  const back = new Set();
  const state = new Map();  // 1: on the stack, 2: done
  const visit = (v) => {
    state.set(v, 1);
    for (const w of out.get(v)) {
      if (state.get(w) === 1) back.add(`${v}->${w}`);
      else if (!state.has(w)) visit(w);
    }
    state.set(v, 2);
  };
  if (out.has('__start__')) visit('__start__');
  for (const id of ids) if (!state.has(id)) visit(id);
  // Longest-path layers over the edges that are not back edges.
  const layer = new Map(ids.map(id => [id, 0]));
  const indeg = new Map(ids.map(id => [id, 0]));
  for (const [v, ws] of out) for (const w of ws) if (!back.has(`${v}->${w}`)) indeg.set(w, indeg.get(w) + 1);
  const queue = ids.filter(id => indeg.get(id) === 0);
  while (queue.length) {
    const v = queue.shift();
    for (const w of out.get(v)) {
      if (back.has(`${v}->${w}`)) continue;
      layer.set(w, Math.max(layer.get(w), layer.get(v) + 1));
      indeg.set(w, indeg.get(w) - 1);
      if (indeg.get(w) === 0) queue.push(w);
    }
  }
  const last = Math.max(0, ...layer.values());
  if (layer.has('__end__')) layer.set('__end__', Math.max(last, 1));
  const layers = [];
  for (const id of ids) (layers[layer.get(id)] ??= []).push(id);
  for (let i = 0; i < layers.length; i++) layers[i] ??= [];
  // Order within layers by the mean position of each node's neighbours above, then below.
  const preds = new Map(ids.map(id => [id, []]));
  for (const [v, ws] of out) for (const w of ws) preds.get(w).push(v);
  const index = new Map();
  const reindex = () => layers.forEach(l => l.forEach((id, i) => index.set(id, i)));
  reindex();
  const mean = (xs, fallback) => xs.length ? xs.reduce((a, b) => a + index.get(b), 0) / xs.length : fallback;
  for (let sweep = 0; sweep < 4; sweep++) {
    const down = sweep % 2 === 0;
    for (const l of down ? layers.slice(1) : layers.slice(0, -1).reverse()) {
      const key = new Map(l.map(id => [id, mean(down ? preds.get(id) : out.get(id), index.get(id))]));
      l.sort((a, b) => key.get(a) - key.get(b));
      reindex();
    }
  }
  const widest = Math.max(1, ...layers.map(l => l.length));
  const width = 2 * (PAD + 40) + widest * W + (widest - 1) * GAP_X;  // 40 a side: room for loops
  const pos = new Map();
  layers.forEach((l, li) => {
    const row = l.length * W + (l.length - 1) * GAP_X;
    const x0 = (width - row) / 2;
    l.forEach((id, i) => pos.set(id, { x: x0 + i * (W + GAP_X), y: PAD + li * (H + GAP_Y), layer: li }));
  });
  return { pos, back, width, height: PAD * 2 + layers.length * H + (layers.length - 1) * GAP_Y };
}

function label(node) {
  if (node.id === '__start__') return 'start';
  if (node.id === '__end__') return 'end';
  return node.id;
}

function kind(node) {
  const d = node.data;
  return d && typeof d === 'object' && Array.isArray(d.id) ? d.id[d.id.length - 1] : '';
}

// Draws `g` ({nodes, edges}) into `host`. `live`: {running: Set, waiting: Set, visits: Map}.
export function drawGraph(host, g, live) {
  const { pos, back, width, height } = layout(g.nodes, g.edges);
  const root = svg('svg', {
    viewBox: `0 0 ${width} ${height}`, width, height, class: 'graph',
    role: 'group', 'aria-label': 'the graph: nodes and edges',
  });
  const defs = svg('defs');
  for (const [id, cls] of [['arrow', 'edge-head'], ['arrow-hot', 'edge-head hot']])
    defs.append(svg('marker', { id, viewBox: '0 0 10 10', refX: 9, refY: 5, markerWidth: 7, markerHeight: 7, orient: 'auto-start-reverse' },
      svg('path', { d: 'M0,0 L10,5 L0,10 z', class: cls })));
  root.append(defs);
  const hot = new Set([...live.running, ...live.waiting]);
  for (const e of g.edges) {
    const a = pos.get(e.source), b = pos.get(e.target);
    if (!a || !b) continue;
    let d;
    if (back.has(`${e.source}->${e.target}`) || b.layer <= a.layer) {
      // A loop back up, round the side of the graph the source is on: out of its side, into
      // the target's same side.
      const left = a.x + W / 2 < width / 2;
      const x1 = left ? a.x : a.x + W, x2 = left ? b.x : b.x + W;
      const y1 = a.y + H / 2, y2 = b.y + H / 2;
      const bulge = left ? Math.min(x1, x2) - 34 : Math.max(x1, x2) + 34;
      d = `M${x1},${y1} C${bulge},${y1} ${bulge},${y2} ${left ? x2 - 2 : x2 + 2},${y2}`;
    } else {
      const x1 = a.x + W / 2, y1 = a.y + H, x2 = b.x + W / 2, y2 = b.y - 2;
      const my = (y1 + y2) / 2;
      d = `M${x1},${y1} C${x1},${my} ${x2},${my} ${x2},${y2}`;
    }
    const isHot = hot.has(e.target) && live.visits.has(e.source);
    root.append(svg('path', {
      d, class: `edge${e.conditional ? ' conditional' : ''}${isHot ? ' hot' : ''}`,
      'marker-end': `url(#${isHot ? 'arrow-hot' : 'arrow'})`,
    }));
  }
  for (const n of g.nodes) {
    const p = pos.get(n.id);
    const visits = live.visits.get(n.id) || 0;
    const cls = ['node'];
    if (n.id === '__start__' || n.id === '__end__') cls.push('terminal');
    if (live.running.has(n.id)) cls.push('running');
    if (live.waiting.has(n.id)) cls.push('waiting');
    if (visits) cls.push('visited');
    const state = live.running.has(n.id) ? ', running now' : live.waiting.has(n.id) ? ', waiting for input' : '';
    const grp = svg('g', {
      class: cls.join(' '), transform: `translate(${p.x},${p.y})`, tabindex: 0, role: 'img',
      'data-node': n.id,
      'aria-label': `${label(n)}${kind(n) ? ` (${kind(n)})` : ''}, visited ${visits} time${visits === 1 ? '' : 's'}${state}`,
    });
    grp.append(svg('rect', { width: W, height: H, rx: n.id.startsWith('__') ? 17 : 6 }));
    const t = svg('text', { x: 10, y: H / 2 + 4, class: 'node-label' });
    t.textContent = label(n).length > 15 ? `${label(n).slice(0, 14)}…` : label(n);
    grp.append(t);
    if (kind(n)) {
      const k = svg('text', { x: W - 8, y: 12, class: 'node-kind', 'text-anchor': 'end' });
      k.textContent = kind(n);
      grp.append(k);
    }
    if (visits) {
      const v = svg('text', { x: W - 8, y: H - 6, class: 'node-visits', 'text-anchor': 'end' });
      v.textContent = `×${visits}`;
      grp.append(v);
    }
    const title = svg('title');
    title.textContent = grp.getAttribute('aria-label');
    grp.append(title);
    root.append(grp);
  }
  host.replaceChildren(root);
}
