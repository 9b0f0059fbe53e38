// The differential suite's client: the same flows, with the official JS client, against any
// LangGraph server (weir serve --workflows tests/langgraph/workflows, or the reference server
// @langchain/langgraph-api with bench/langgraph/peer's twin graphs), printing what a client saw
// as one JSON object with ids and times normalised, so that two servers' answers can be compared
// key by key (tests/langgraph/langgraph_diff_test.cpp does, and names each known difference).
//
// Normalised: ids (uuids, weir's run, checkpoint, task, message and interrupt ids) become
// "<id>", times "<time>", SSE event ids are dropped (their relations are checked here instead);
// the twin graph's node `after_` (LangGraph refuses a node named like a channel) is shown as
// ask.json's `after`. Nothing else is changed: values, event names and order, statuses, keys.
// Usage: node diff_flows.mjs http://127.0.0.1:PORT
import { Client } from "@langchain/langgraph-sdk";

const [apiUrl] = process.argv.slice(2);
const client = new Client({ apiUrl, apiKey: null });
const out = {};

const ID = [
  /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/,  // uuid (any version)
  /^r-[0-9a-f]{16}(\.\d+)?$/,                                      // weir run (and attempt)
  /^\d{12}-[0-9a-f]+$/,                                              // weir checkpoint
  /^[0-9a-f]{32}$/,                                                  // weir task, interrupt
  /^weir-[0-9a-f]+$/,                                                // weir message (old)
  /^msg-[0-9a-f]{16}$/,                                              // weir message
  /^run--?[0-9a-f-]+$/,                                              // LangChain's run-<uuid>
];
const TIME = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)$/;
const NODE_ALIASES = { after_: "after" };

function norm(v) {
  if (typeof v === "string") {
    if (ID.some((re) => re.test(v))) return "<id>";
    if (TIME.test(v)) return "<time>";
    return NODE_ALIASES[v] ?? v;
  }
  if (Array.isArray(v)) return v.map(norm);
  if (v && typeof v === "object") {
    const o = {};
    for (const [k, x] of Object.entries(v)) o[NODE_ALIASES[k] ?? k] = norm(x);
    return o;
  }
  return v;
}

// A flow's failure is recorded with its HTTP status, not thrown: the test names what broke.
async function flow(name, f) {
  const t0 = performance.now();
  try {
    out[name] = norm(await f());
  } catch (e) {
    out[name] = { thrown: String(e?.message ?? e).slice(0, 300), status: e?.status ?? null };
  }
  if (process.env.DIFF_FLOWS_TIMES) console.error(name, Math.round(performance.now() - t0), "ms");
}
// What a refused call gave the client: its HTTP status (the SDK's error text differs by server).
const status = async (f) => {
  try {
    await f();
    return "ok";
  } catch (e) {
    return e?.status ?? "no status";
  }
};
const collect = async (iter, cap = Infinity) => {
  const events = [];
  for await (const chunk of iter) {
    events.push(chunk);
    if (events.length >= cap) break;
  }
  return events;
};
const shown = (events) => events.map((e) => ({ event: e.event, data: e.data }));
const names = (events) => events.map((e) => e.event);
const keys = (o) => (o && typeof o === "object" ? Object.keys(o).sort() : o);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
// Polls a run until it leaves pending/running (the reference server answers a cancel before
// the run has stopped).
async function settled(threadId, runId) {
  for (let i = 0; i < 100; i++) {
    const r = await client.runs.get(threadId, runId);
    if (r.status !== "pending" && r.status !== "running") return r;
    await sleep(50);
  }
  return client.runs.get(threadId, runId);
}
const GRAPHS = ["ask", "boom", "chat", "steps", "ticks"];

await flow("info", async () => {
  const r = await fetch(apiUrl + "/info");
  const info = await r.json();
  return { status: r.status, keys: keys(info), flags: keys(info.flags),
           ok: await (await fetch(apiUrl + "/ok")).json() };
});

await flow("assistants", async () => {
  const all = await client.assistants.search({ limit: 100 });
  const steps = await client.assistants.get("steps");
  const graph = await client.assistants.getGraph("steps");
  // Raw, as the SDK retries a 500: the reference server cannot extract the schemas of a plain
  // JavaScript graph file (its extractor reads TypeScript types), so only weir's are compared.
  const sr = await fetch(`${apiUrl}/assistants/${steps.assistant_id}/schemas`);
  const schemas = sr.ok ? await sr.json() : {};
  const one = await client.assistants.search({ graphId: "ask" });
  const edge = (e) => [e.source, e.target, !!e.conditional];
  return {
    graphs: GRAPHS.filter((g) => all.some((a) => a.graph_id === g)),
    keys: keys(steps),
    // The graph's default assistant is named uuid5(graph_id) on both servers.
    default_id: steps.assistant_id === "01d10e59-d4b4-51ec-8e94-9b2716b34de8",
    by_graph: one.map((a) => a.graph_id),
    nodes: graph.nodes.map((n) => n.id).sort(),
    edges: graph.edges.map(edge).sort(),
    schemas_status: sr.status, schemas: keys(schemas),
    input: keys(schemas.input_schema?.properties),
    state: keys(schemas.state_schema?.properties),
  };
});

await flow("thread", async () => {
  const created = await client.threads.create({ metadata: { user: "u1" } });
  const fresh = await client.threads.getState(created.thread_id);
  const final = await client.runs.wait(created.thread_id, "steps", { input: { topic: "t" } });
  const after = await client.threads.get(created.thread_id);
  const state = await client.threads.getState(created.thread_id);
  const history = await client.threads.getHistory(created.thread_id, { limit: 10 });
  const before = await client.threads.getHistory(created.thread_id, {
    limit: 10, before: history[0].checkpoint.checkpoint_id });  // the reference takes an id only
  const found = await client.threads.search({ metadata: { graph_id: "steps", user: "u1" } });
  const again = await status(() => client.threads.create({ threadId: created.thread_id, ifExists: "raise" }));
  return {
    created, fresh: { values: fresh.values, next: fresh.next, checkpoint: fresh.checkpoint },
    final, after, state,
    history: history.map((h) => ({ values: h.values, next: h.next, step: h.metadata?.step,
                                   source: h.metadata?.source, tasks: h.tasks.map((x) => x.name) })),
    history_keys: keys(history[0]),
    head_is_state: history[0].checkpoint.checkpoint_id === state.checkpoint.checkpoint_id,
    parents_chain: history.slice(0, -1).every((h, i) =>
      h.parent_checkpoint?.checkpoint_id === history[i + 1].checkpoint.checkpoint_id),
    before_count: before.length,
    found: found.map((t) => t.thread_id === created.thread_id),
    again,
  };
});

// One stream per mode, so each mode's own sequence is compared; then values+updates together.
const MODES = { values: "steps", updates: "steps", checkpoints: "steps", tasks: "steps",
                debug: "steps", custom: "steps", "messages-tuple": "chat" };
for (const [mode, graph] of Object.entries(MODES)) {
  await flow(`stream_${mode}`, async () => {
    const t = await client.threads.create();
    const input = graph === "chat" ? { messages: [{ type: "human", content: "6*7?" }] } : { topic: "t" };
    const events = await collect(client.runs.stream(t.thread_id, graph, { input, streamMode: mode }));
    return { names: names(events), events: shown(events) };
  });
}
// The events mode (astream_events v2): the graph's and its nodes' runs beginning and ending, in
// order. LangGraph's own runnables inside a node (ChannelWrite, the branch functions) and
// on_chain_stream are left out: weir has no counterpart of them.
await flow("stream_events", async () => {
  const t = await client.threads.create();
  const nodes = new Set(["LangGraph", "first", "second", "third"]);
  const events = await collect(client.runs.stream(t.thread_id, "steps", {
    input: { topic: "t" }, streamMode: "events" }));
  const seq = events.filter((e) => e.event === "events" && nodes.has(e.data.name) &&
                                   (e.data.event === "on_chain_start" || e.data.event === "on_chain_end"))
    .map((e) => `${e.data.event} ${e.data.name}`);
  const end = events.find((e) => e.event === "events" && e.data.name === "LangGraph" &&
                                 e.data.event === "on_chain_end");
  return { seq, output_keys: Object.keys(end?.data?.data?.output ?? {}).sort() };
});
await flow("stream_values_updates", async () => {
  const t = await client.threads.create();
  const events = await collect(client.runs.stream(t.thread_id, "steps", {
    input: { topic: "t" }, streamMode: ["values", "updates"] }));
  return { names: names(events), events: shown(events) };
});

await flow("interrupt", async () => {
  const t = await client.threads.create();
  const first = await client.runs.wait(t.thread_id, "ask", { input: { question: "proceed?" } });
  const paused = await client.threads.get(t.thread_id);
  const state = await client.threads.getState(t.thread_id);
  const events = await collect(client.runs.stream(t.thread_id, "ask", {
    command: { resume: "yes" }, streamMode: ["values", "updates"] }));
  const done = await client.threads.get(t.thread_id);
  const runs = await client.runs.list(t.thread_id);
  return {
    first, paused_status: paused.status, paused_interrupts: paused.interrupts,
    state: { values: state.values, next: state.next, tasks: state.tasks, interrupts: state.interrupts },
    same_interrupt: first.__interrupt__?.[0]?.id === state.tasks?.[0]?.interrupts?.[0]?.id,
    events: shown(events), done_status: done.status, done_values: done.values,
    run_statuses: runs.map((r) => r.status),
  };
});

await flow("interrupt_stream", async () => {
  // An interrupt as a stream shows it: what Agent Chat UI reads.
  const t = await client.threads.create();
  const events = await collect(client.runs.stream(t.thread_id, "ask", {
    input: { question: "go?" }, streamMode: ["values", "updates"] }));
  return { events: shown(events) };
});

await flow("chat", async () => {
  const t = await client.threads.create();
  const final = await client.runs.wait(t.thread_id, "chat", {
    input: { messages: [{ type: "human", content: "what is 6*7?", id: "m-1" }] } });
  const events = await collect(client.runs.stream(t.thread_id, "chat", {
    input: { messages: [{ type: "human", content: "and 7*6?" }] }, streamMode: "updates" }));
  const state = await client.threads.getState(t.thread_id);
  const ids = state.values.messages.map((m) => m.id);
  return { final, updates: shown(events), count: ids.length,
           first_id_kept: ids[0] === "m-1", ids_unique: new Set(ids).size === ids.length };
});

await flow("errors", async () => {
  const t = await client.threads.create();
  const waited = await status(() => client.runs.wait(t.thread_id, "boom", { input: {} }));
  const thread = await client.threads.get(t.thread_id);
  const runs = await client.runs.list(t.thread_id);
  const u = await client.threads.create();
  const events = await collect(client.runs.stream(u.thread_id, "boom", { input: {} }));
  return {
    waited, thread_status: thread.status, run_statuses: runs.map((r) => r.status),
    stream: names(events), error_keys: keys(events.at(-1)?.data),
    unknown_assistant: await status(() => client.runs.wait(null, "nope", { input: {} })),
    unknown_thread: await status(() => client.threads.get("00000000-0000-4000-8000-000000000000")),
    unknown_run: await status(() => client.runs.get(t.thread_id, "00000000-0000-4000-8000-000000000000")),
    not_json: (await fetch(apiUrl + "/threads", { method: "POST", body: "{",
                                                   headers: { "Content-Type": "application/json" } })).status,
  };
});

await flow("background", async () => {
  const t = await client.threads.create();
  const run = await client.runs.create(t.thread_id, "steps", { input: { topic: "bg" } });
  const joined = await client.runs.join(t.thread_id, run.run_id);
  const got = await client.runs.get(t.thread_id, run.run_id);
  const list = await client.runs.list(t.thread_id);
  return { created_status: run.status, run_keys: keys(got), joined, status: got.status,
           listed: list.length, same: list[0]?.run_id === run.run_id };
});

await flow("cancel", async () => {
  const t = await client.threads.create();
  const run = await client.runs.create(t.thread_id, "ticks", { input: {} });
  await sleep(150);
  const busy = await client.threads.get(t.thread_id);
  const second = await status(() => client.runs.create(t.thread_id, "steps", { input: {} }));
  await client.runs.cancel(t.thread_id, run.run_id, true);
  const got = await settled(t.thread_id, run.run_id);
  const after = await client.threads.get(t.thread_id);
  return { busy_status: busy.status, second, status: got.status, thread_status: after.status };
});

await flow("rejoin", async () => {
  // A resumable stream cut after its third event, then rejoined with Last-Event-ID.
  const t = await client.threads.create();
  let created = null;
  const head = await collect(client.runs.stream(t.thread_id, "ticks", {
    input: {}, streamMode: ["values"], streamResumable: true, onDisconnect: "continue",
    onRunCreated: (m) => { created = m; } }), 3);
  const lastId = head.at(-1).id;
  const rest = await collect(client.runs.joinStream(t.thread_id, created.run_id,
    { lastEventId: lastId, streamMode: ["values"] }));
  const whole = await collect(client.runs.joinStream(t.thread_id, created.run_id,
    { lastEventId: "-1", streamMode: ["values"] }));
  const ids = (es) => es.filter((e) => e.id !== undefined).map((e) => e.id);
  const wholeIds = ids(whole);
  const at = wholeIds.indexOf(lastId);
  return {
    head: names(head), rest: shown(rest), whole: names(whole),
    rest_is_tail: at >= 0 && JSON.stringify(ids(rest)) === JSON.stringify(wholeIds.slice(at + 1)),
    final: whole.at(-1)?.data,
  };
});

await flow("fork", async () => {
  const t = await client.threads.create();
  await client.runs.wait(t.thread_id, "steps", { input: { topic: "a" } });
  const first = await client.threads.getState(t.thread_id);
  await client.runs.wait(t.thread_id, "steps", { input: { topic: "b" } });
  const forked = await client.runs.wait(t.thread_id, "steps", { input: { topic: "c" },
    checkpoint: { checkpoint_id: first.checkpoint.checkpoint_id } });
  const history = await client.threads.getHistory(t.thread_id, { limit: 100 });
  const state = await client.threads.getState(t.thread_id);
  return { forked, history_length: history.length,
           parent_is_fork_point: history.some((h) => h.checkpoint.checkpoint_id === first.checkpoint.checkpoint_id),
           head: state.values };
});

await flow("state_ops", async () => {
  const t = await client.threads.create({ metadata: { who: "ops" } });
  await client.runs.wait(t.thread_id, "steps", { input: { topic: "a" } });
  const updated = await client.threads.updateState(t.thread_id, { values: { topic: "z" }, asNode: "third" });
  const state = await client.threads.getState(t.thread_id);
  const copy = await client.threads.copy(t.thread_id);
  const copied = await client.threads.getState(copy.thread_id);
  await client.threads.delete(t.thread_id);
  return { updated_keys: keys(updated), updated_checkpoint: keys(updated.checkpoint),
           values: state.values, next: state.next, step: state.metadata?.step,
           source: state.metadata?.source, copy_metadata: copy.metadata, copied: copied.values,
           deleted: await status(() => client.threads.get(t.thread_id)) };
});

await flow("double_texting", async () => {
  const out = {};
  for (const strategy of ["reject", "interrupt", "rollback", "enqueue"]) {
    const t = await client.threads.create();
    const first = await client.runs.create(t.thread_id, "ticks", { input: {} });
    await sleep(150);
    let second = null;
    try {
      second = await client.runs.create(t.thread_id, "steps", { input: { topic: strategy },
                                                              multitaskStrategy: strategy });
    } catch (e) {
      out[strategy] = { second: e?.status ?? "no status" };
      await client.runs.cancel(t.thread_id, first.run_id, true);
      continue;
    }
    const joined = await client.runs.join(t.thread_id, second.run_id);
    const a = await settled(t.thread_id, first.run_id);
    const b = await settled(t.thread_id, second.run_id);
    const runs = await client.runs.list(t.thread_id);
    out[strategy] = { first: a.status, second: b.status, joined, runs: runs.length };
  }
  return out;
});

await flow("stateless", async () => {
  const final = await client.runs.wait(null, "steps", { input: { topic: "s" } });
  const events = await collect(client.runs.stream(null, "steps", { input: { topic: "s" },
                                                                  streamMode: "updates" }));
  return { final, events: shown(events) };
});

process.stdout.write(JSON.stringify(out) + "\n");
