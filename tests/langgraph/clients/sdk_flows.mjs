// Drives `weir serve`'s LangGraph Server API with the official JS client, as a user's program
// would, and prints what each flow saw as one JSON object (tests/langgraph/langgraph_sdk_test.cpp
// checks it). Usage: node sdk_flows.mjs http://127.0.0.1:PORT [API_KEY]
import { Client } from "@langchain/langgraph-sdk";

const [apiUrl, apiKey] = process.argv.slice(2);
const client = new Client({ apiUrl, apiKey: apiKey ?? null });
const out = {};

// A flow's failure is recorded with its HTTP status, not thrown: the test names what broke.
async function flow(name, f) {
  try {
    out[name] = await f();
  } catch (e) {
    out[name] = { thrown: String(e?.message ?? e), status: e?.status ?? null };
  }
}
const caught = async (f) => {
  try {
    await f();
    return { thrown: null };
  } catch (e) {
    return { thrown: String(e?.message ?? e), status: e?.status ?? null };
  }
};
const collect = async (iter) => {
  const events = [];
  for await (const chunk of iter) events.push(chunk);
  return events;
};
const shown = (events) => events.map((e) => ({ event: e.event, data: e.data }));

await flow("assistants", async () => {
  const all = await client.assistants.search({ limit: 10 });
  const steps = await client.assistants.get("steps");
  const byId = await client.assistants.get(steps.assistant_id);
  const graph = await client.assistants.getGraph("steps");
  const schemas = await client.assistants.getSchemas("steps");
  const one = await client.assistants.search({ graphId: "ask" });
  return { graph_ids: all.map((a) => a.graph_id), steps, by_id: byId.graph_id, graph, schemas,
           one: one.map((a) => a.graph_id) };
});

await flow("threads", async () => {
  const t = await client.threads.create({ metadata: { user: "u1" } });
  const got = await client.threads.get(t.thread_id);
  const final = await client.runs.wait(t.thread_id, "steps", { input: { topic: "t" } });
  const after = await client.threads.get(t.thread_id);
  const state = await client.threads.getState(t.thread_id);
  const history = await client.threads.getHistory(t.thread_id, { limit: 10 });
  const older = await client.threads.getHistory(t.thread_id, {
    limit: 10, before: { configurable: { checkpoint_id: history[0].checkpoint.checkpoint_id } } });
  const mine = await client.threads.search({ metadata: { user: "u1" } });
  const byGraph = await client.threads.search({ metadata: { graph_id: "steps" } });
  const again = await caught(() => client.threads.create({ threadId: t.thread_id, ifExists: "raise" }));
  const same = await client.threads.create({ threadId: t.thread_id, ifExists: "do_nothing" });
  const missing = await caught(() => client.threads.get("no-such-thread"));
  return { created: t, got, final, after, state, history, older_count: older.length,
           mine: mine.map((x) => x.thread_id), by_graph: byGraph.map((x) => x.thread_id), again,
           same: same.thread_id, missing };
});

await flow("interrupt", async () => {
  const t = await client.threads.create();
  const first = await client.runs.wait(t.thread_id, "ask", { input: { question: "proceed?" } });
  const paused = await client.threads.get(t.thread_id);
  const state = await client.threads.getState(t.thread_id);
  let created = null;
  const events = await collect(client.runs.stream(t.thread_id, "ask", {
    command: { resume: "yes" }, streamMode: ["values", "updates"],
    onRunCreated: (m) => { created = m; } }));
  const done = await client.threads.get(t.thread_id);
  return { first, paused_status: paused.status, interrupts: paused.interrupts, next: state.next,
           tasks: state.tasks, events: shown(events), created, done_status: done.status, values: done.values };
});

await flow("background", async () => {
  const t = await client.threads.create();
  let created = null;
  const run = await client.runs.create(t.thread_id, "steps", { input: { topic: "bg" },
    onRunCreated: (m) => { created = m; } });
  const joined = await client.runs.join(t.thread_id, run.run_id);
  const got = await client.runs.get(t.thread_id, run.run_id);
  const list = await client.runs.list(t.thread_id);
  return { run, created, joined, status: got.status, listed: list.map((r) => r.run_id) };
});

await flow("cancel", async () => {
  const t = await client.threads.create();
  const run = await client.runs.create(t.thread_id, "slow", { input: {} });
  const busy = await client.threads.get(t.thread_id);
  const second = await caught(() => client.runs.create(t.thread_id, "steps", { input: {} }));
  await client.runs.cancel(t.thread_id, run.run_id, true);
  const got = await client.runs.get(t.thread_id, run.run_id);
  return { busy_status: busy.status, second, status: got.status };
});

await flow("errors", async () => {
  const waited = await caught(() => client.runs.wait(null, "boom", { input: {} }));
  const events = await collect(client.runs.stream(null, "boom", { input: {} }));
  const unknown = await caught(() => client.runs.wait(null, "nope", { input: {} }));
  const bad_input = await caught(() => client.runs.wait(null, "steps", { input: { nope: 1 } }));
  const fork = await caught(() => client.runs.wait(null, "steps", { input: {}, checkpointId: "x" }));
  const stateless = await client.runs.wait(null, "steps", { input: { topic: "s" } });
  return { waited, events: shown(events), unknown, bad_input, fork, stateless };
});

await flow("messages", async () => {
  const t = await client.threads.create();
  const final = await client.runs.wait(t.thread_id, "chat", {
    input: { messages: [{ type: "human", content: "what is 6*7?", id: "m-1" }] } });
  const events = await collect(client.runs.stream(t.thread_id, "chat", {
    input: { messages: [{ type: "human", content: [{ type: "text", text: "and 7*6?" }] }] },
    streamMode: "updates" }));
  const state = await client.threads.getState(t.thread_id);
  return { final, updates: events.filter((e) => e.event === "updates").map((e) => e.data),
           ids: state.values.messages.map((m) => m.id) };
});

await flow("streams", async () => {
  // Agent Chat UI's modes: values and messages-tuple, resumable.
  const t = await client.threads.create();
  const chat = await collect(client.runs.stream(t.thread_id, "chat", {
    input: { messages: [{ type: "human", content: "6*7?" }] },
    streamMode: ["values", "messages-tuple"], streamResumable: true }));
  // A background run joined twice: from the start, and after its second event.
  const u = await client.threads.create();
  const run = await client.runs.create(u.thread_id, "ticks", { input: {} });
  const whole = await collect(client.runs.joinStream(u.thread_id, run.run_id,
    { streamMode: ["values"] }));
  const withIds = whole.filter((e) => e.id !== undefined);
  const after = await collect(client.runs.joinStream(u.thread_id, run.run_id,
    { streamMode: ["values"], lastEventId: withIds[1].id }));
  return { chat: shown(chat), whole: whole.map((e) => e.id ?? null),
           after: after.map((e) => e.id ?? null), last: whole[whole.length - 1].data };
});

await flow("thread_ops", async () => {
  // Fork from the end of the first run, update the state, copy, delete.
  const t = await client.threads.create({ metadata: { who: "ops" } });
  await client.runs.wait(t.thread_id, "steps", { input: { topic: "a" } });
  const first = await client.threads.getState(t.thread_id);
  await client.runs.wait(t.thread_id, "steps", { input: { topic: "b" } });
  const forked = await client.runs.wait(t.thread_id, "steps", { input: { topic: "c" },
    checkpoint: { checkpoint_id: first.checkpoint.checkpoint_id } });
  const updated = await client.threads.updateState(t.thread_id, { values: { topic: "z" },
    asNode: "third" });
  const state = await client.threads.getState(t.thread_id);
  const copy = await client.threads.copy(t.thread_id);
  const copied = await client.threads.getState(copy.thread_id);
  await client.threads.delete(t.thread_id);
  const deleted = await caught(() => client.threads.get(t.thread_id));
  const pruned = await client.threads.prune([copy.thread_id], { strategy: "keep_latest" });
  const history = await client.threads.getHistory(copy.thread_id);
  return { forked_seen: forked.seen, updated, topic: state.values.topic,
           copy_metadata: copy.metadata, copied_topic: copied.values.topic, deleted,
           pruned, history_length: history.length };
});

await flow("assistants_made", async () => {
  const made = await client.assistants.create({
    graphId: "steps", name: "Steps for docs", metadata: { team: "docs" },
    config: { recursion_limit: 5 } });
  const updated = await client.assistants.update(made.assistant_id, { name: "Steps, reviewed" });
  const versions = await client.assistants.getVersions(made.assistant_id);
  const back = await client.assistants.setLatest(made.assistant_id, 1);
  const found = await client.assistants.search({ metadata: { team: "docs" } });
  const final = await client.runs.wait(null, made.assistant_id, { input: { topic: "m" } });
  await client.assistants.delete(made.assistant_id);
  const gone = await caught(() => client.assistants.get(made.assistant_id));
  return { made, updated: updated.name, versions: versions.map((v) => v.version),
           back: back.name, found: found.map((x) => x.assistant_id), final, gone };
});

process.stdout.write(JSON.stringify(out) + "\n");
