// The console's only way to the server: the LangGraph Server API and /metrics, as any script
// could call them. The API key (when the server has one) lives in this tab's sessionStorage.

const KEY = 'weir-console-key';

export class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

let unauthorized = () => {};
export function onUnauthorized(fn) { unauthorized = fn; }
export function setApiKey(key) { sessionStorage.setItem(KEY, key); }

function headers(withBody) {
  const h = {};
  if (withBody) h['Content-Type'] = 'application/json';
  const key = sessionStorage.getItem(KEY);
  if (key) h['X-Api-Key'] = key;
  return h;
}

function messageOf(data, text, status) {
  if (data && typeof data === 'object') {
    if (typeof data.detail === 'string') return data.detail;
    if (data.error && typeof data.error.message === 'string') return data.error.message;
  }
  return text ? String(text).slice(0, 300) : `HTTP ${status}`;
}

async function check(r) {
  if (r.ok) return r;
  const text = await r.text();
  let data = null;
  try { data = JSON.parse(text); } catch { /* not JSON: the text is the message */ }
  const message = messageOf(data, text, r.status);
  if (r.status === 401) unauthorized(message, sessionStorage.getItem(KEY) !== null);
  throw new ApiError(r.status, message);
}

// A JSON call: {data, total} (total: X-Pagination-Total when the answer has it).
export async function call(method, path, body) {
  const r = await check(await fetch(path, {
    method,
    headers: headers(body !== undefined),
    body: body === undefined ? undefined : JSON.stringify(body),
  }));
  const text = await r.text();
  const total = r.headers.get('X-Pagination-Total');
  return { data: text ? JSON.parse(text) : null, total: total === null ? null : Number(total) };
}

// The bytes of a GET as a Blob (an artifact's download).
export async function blob(path) {
  const r = await check(await fetch(path, { headers: headers(false) }));
  return r.blob();
}

export async function metricsText() {
  const r = await check(await fetch('/metrics', { headers: headers(false) }));
  return r.text();
}

// Server-sent events of a GET, as {event, data, id}, until the server ends the stream or
// `signal` aborts it. fetch rather than EventSource: it can send the key, and it does not
// reconnect by itself (a finished run's stream ends; the view decides what to do next).
export async function* events(path, signal) {
  const r = await check(await fetch(path, { headers: headers(false), signal }));
  const reader = r.body.getReader();
  const decoder = new TextDecoder();
  let buf = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buf += decoder.decode(value, { stream: true }).replace(/\r\n/g, '\n');
    let end;
    while ((end = buf.indexOf('\n\n')) >= 0) {
      const block = buf.slice(0, end);
      buf = buf.slice(end + 2);
      const ev = { event: 'message', data: '', id: null };
      const data = [];
      for (const line of block.split('\n')) {
        if (line.startsWith(':')) continue;  // a keep-alive comment
        const colon = line.indexOf(':');
        const field = colon < 0 ? line : line.slice(0, colon);
        const val = colon < 0 ? '' : line.slice(colon + 1).replace(/^ /, '');
        if (field === 'event') ev.event = val;
        else if (field === 'data') data.push(val);
        else if (field === 'id') ev.id = val;
      }
      if (!data.length) continue;
      try { ev.data = JSON.parse(data.join('\n')); } catch { ev.data = data.join('\n'); }
      yield ev;
    }
  }
}
