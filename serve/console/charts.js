// /metrics read as Prometheus text, and the few SVG charts the fences view draws from it.

const NS = 'http://www.w3.org/2000/svg';

function svg(tag, attrs = {}) {
  const e = document.createElementNS(NS, tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  return e;
}

// [{name, labels: {k: v}, value}] for every sample line.
export function parseMetrics(text) {
  const out = [];
  for (const line of text.split('\n')) {
    if (!line || line.startsWith('#')) continue;
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)/.exec(line);
    if (!m) continue;
    const labels = {};
    if (m[3]) for (const l of m[3].matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g)) labels[l[1]] = l[2];
    const value = m[4] === '+Inf' ? Infinity : m[4] === '-Inf' ? -Infinity : Number(m[4]);
    out.push({ name: m[1], labels, value });
  }
  return out;
}

export function pick(samples, name, where = {}) {
  return samples.filter(s => s.name === name && Object.entries(where).every(([k, v]) => s.labels[k] === v));
}

export function bytes(n) {
  if (!Number.isFinite(n)) return 'unlimited';
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return i === 0 ? `${n} B` : `${n.toFixed(1)} ${units[i]}`;
}

// Horizontal bars: rows [{label, value, limit (or null), text}], each against its limit, or
// against the largest value when it has none.
export function bars(host, rows) {
  const W = 360, ROW = 30, LABEL = 96;
  const scale = Math.max(1, ...rows.map(r => (r.limit ?? r.value)));
  const root = svg('svg', { viewBox: `0 0 ${W} ${rows.length * ROW}`, class: 'chart bars', role: 'img' });
  root.setAttribute('aria-label', rows.map(r => `${r.label}: ${r.text}`).join('; '));
  rows.forEach((r, i) => {
    const y = i * ROW;
    const room = W - LABEL - 4;
    const t = svg('text', { x: 0, y: y + 13, class: 'bar-label' });
    t.textContent = r.label;
    root.append(t);
    const full = r.limit ? room : room * ((r.value || 0) / scale);
    root.append(svg('rect', { x: LABEL, y: y + 2, width: room, height: 14, class: 'bar-track' }));
    const frac = r.limit ? Math.min(1, r.value / r.limit) : (scale ? r.value / scale : 0);
    const cls = r.limit && frac > 0.9 ? 'bar-fill hot' : 'bar-fill';
    root.append(svg('rect', { x: LABEL, y: y + 2, width: Math.max(r.value ? 1 : 0, room * frac), height: 14, class: cls }));
    if (r.limit) root.append(svg('line', { x1: LABEL + full - 1, x2: LABEL + full - 1, y1: y, y2: y + 18, class: 'bar-limit' }));
    const v = svg('text', { x: LABEL, y: y + 28, class: 'bar-text' });
    v.textContent = r.text;
    root.append(v);
  });
  host.replaceChildren(root);
}

// A line over the last samples of one or more series: series [{label, values, cls}].
export function sparkline(host, series, { max = null } = {}) {
  const W = 360, H = 64;
  const n = Math.max(2, ...series.map(s => s.values.length));
  const top = Math.max(1, max ?? 0, ...series.flatMap(s => s.values));
  const root = svg('svg', { viewBox: `0 0 ${W} ${H + 14}`, class: 'chart spark', role: 'img' });
  root.setAttribute('aria-label', series.map(s => `${s.label}: now ${s.values.at(-1) ?? 0}`).join('; '));
  root.append(svg('line', { x1: 0, x2: W, y1: H, y2: H, class: 'axis' }));
  const t = svg('text', { x: 0, y: 10, class: 'axis-text' });
  t.textContent = String(top);
  root.append(t);
  for (const s of series) {
    const pts = s.values.map((v, i) => `${(i * W) / (n - 1)},${H - (v / top) * (H - 12)}`).join(' ');
    root.append(svg('polyline', { points: pts, class: `line ${s.cls || ''}` }));
  }
  const legend = svg('text', { x: W, y: H + 12, class: 'axis-text', 'text-anchor': 'end' });
  legend.textContent = series.map(s => `${s.label} ${s.values.at(-1) ?? 0}`).join('   ');
  root.append(legend);
  host.replaceChildren(root);
}
