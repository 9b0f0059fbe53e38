// Agent Chat UI's calls, in its order and with its bodies, against `weir serve`, and what the UI
// would show after each: tests/langgraph/langgraph_chat_ui_test.cpp checks it.
//
// Agent Chat UI (github.com/langchain-ai/agent-chat-ui) is a Next.js page over the SDK's React
// hook useStream (@langchain/langgraph-sdk/react, dist/react/stream.lgp.js). What it calls:
// - on load: `fetch(apiUrl + "/info")` (src/providers/Stream.tsx checkGraphStatus), then
//   `threads.search({metadata: {graph_id} (or {assistant_id} for a uuid), limit: 100})`
//   (src/providers/Thread.tsx getThreads); again 4 s after a new thread id;
// - opening a thread: the hook's history, `threads.getHistory(id, {limit: 10})`
//   (fetchStateHistory: true);
// - Send (src/components/thread/index.tsx): without a thread, `threads.create({})`; then
//   `runs.stream(thread, assistantId, {input: {messages: [{id: uuid, type: "human", content:
//   [{type: "text", text}]}]}, streamMode: ["values", "messages-tuple", "custom"] (its
//   ["values"], the hook's tracked modes for `messages`, and `custom` for onCustomEvent),
//   streamSubgraphs: true, streamResumable: true, onDisconnect: "continue"})`; when it ends,
//   the history again;
// - Edit a human message (messages/human.tsx): the same stream with `checkpoint` = the
//   message's first-seen state's parent_checkpoint (without thread_id) and the new message;
//   Regenerate (messages/ai.tsx): input undefined, `checkpoint` = the AI message's;
// - an interrupt's answer (agent-inbox, generic-interrupt): `submit({}, {command: {resume}})`:
//   input {}, no streamMode of its own, streamResumable false so onDisconnect "cancel";
// - Cancel: the hook's stop() aborts the stream's fetch; it calls `runs.cancel` only when
//   reconnectOnMount is set (Agent Chat UI does not set it), and then on mount it rejoins
//   (`runs.joinStream(thread, run, {lastEventId: "-1"... })`): both are done here as the hook
//   does them.
// What the UI shows is computed with the SDK's own helpers (getBranchContext,
// getMessagesMetadataMap, userFacingInterrupts*), as the hook computes it.
// Usage: node chat_ui_flows.mjs URL_OF_SAMPLES_WORKFLOWS URL_OF_TEST_WORKFLOWS [URL_OF_SAMPLES_CREWS]
import { Client } from "@langchain/langgraph-sdk";
import {
  getBranchContext, getMessagesMetadataMap, userFacingInterruptsFromThreadTasks,
  userFacingInterruptsFromValuesArray,
} from "@langchain/langgraph-sdk/ui";
import { randomUUID } from "node:crypto";

const [reviewUrl, chatUrl, crewUrl] = process.argv.slice(2);
const out = {};

// One UI session: the client the hook makes, the calls it made (method, path, body), the
// history it holds and the branch it shows.
class Ui {
  constructor(apiUrl, assistantId) {
    this.apiUrl = apiUrl;
    this.assistantId = assistantId;
    this.calls = [];
    this.client = new Client({
      apiUrl, apiKey: undefined,
      onRequest: (url, init) => {
        const u = new URL(url);
        this.calls.push({ method: init.method ?? "GET", path: u.pathname + u.search,
                          body: init.body ? JSON.parse(init.body) : undefined,
                          last_event_id: new Headers(init.headers).get("last-event-id") ?? undefined });
        return init;
      },
    });
    this.threadId = null;
    this.history = [];
    this.branch = "";
  }
  async info() {
    this.calls.push({ method: "GET", path: "/info" });
    const r = await fetch(this.apiUrl + "/info");
    return r.ok;
  }
  async threads() {
    const found = await this.client.threads.search({ metadata: { graph_id: this.assistantId }, limit: 100 });
    return found.map((t) => t.thread_id);
  }
  async loadHistory() {
    this.history = await this.client.threads.getHistory(this.threadId, { limit: 10 });
  }
  // What the page shows: the branch's head values, its messages with their branch switchers,
  // and the interrupt (from the last stream's values, else the head's tasks).
  view(streamValues) {
    const ctx = getBranchContext(this.branch, this.history);
    const values = streamValues ?? ctx.threadHead?.values ?? {};
    const messages = Array.isArray(values.messages) ? values.messages : [];
    const meta = getMessagesMetadataMap({ initialValues: {}, history: this.history,
      getMessages: (v) => (Array.isArray(v.messages) ? v.messages : []), branchContext: ctx });
    let interrupts;
    if (Array.isArray(values.__interrupt__)) interrupts = userFacingInterruptsFromValuesArray(values.__interrupt__);
    else interrupts = userFacingInterruptsFromThreadTasks((ctx.threadHead?.tasks ?? []).flatMap((t) => t.interrupts ?? [])) ?? [];
    return {
      messages: messages.map((m) => ({ type: m.type, text: text(m.content), id: m.id,
                                        tool_calls: m.tool_calls?.map((c) => ({ name: c.name, args: c.args })) })),
      branches: meta.map((m) => m.branchOptions?.length ?? 0),
      interrupt: interrupts.map((i) => i.value),
      values: Object.fromEntries(Object.entries(values).filter(([k]) => k !== "messages")),
      ctx, meta,
    };
  }
  // The hook's submitToThread: create the thread when there is none, then one stream.
  async submit(values, options = {}) {
    if (!this.threadId) this.threadId = (await this.client.threads.create({ threadId: undefined, metadata: undefined })).thread_id;
    const streamMode = [...new Set([...(options.streamMode ?? []), "messages-tuple", "values", "custom"])];
    let checkpoint = options.checkpoint ?? undefined;
    if (checkpoint != null) {
      checkpoint = { ...checkpoint };
      delete checkpoint.thread_id;
    }
    const streamResumable = options.streamResumable ?? false;
    const events = [];
    let runId = null;
    const controller = new AbortController();
    try {
      for await (const e of this.client.runs.stream(this.threadId, this.assistantId, {
        input: values, command: options.command, checkpoint, streamMode,
        streamSubgraphs: options.streamSubgraphs, streamResumable,
        onDisconnect: streamResumable ? "continue" : "cancel", signal: controller.signal,
        onRunCreated: (m) => { runId = m.run_id; } })) {
        events.push({ event: e.event, data: e.data });
        if (options.stopAfter && events.length >= options.stopAfter) controller.abort();  // Cancel
      }
    } catch (e) {
      if (e?.name !== "AbortError") throw e;
    }
    const last = [...events].reverse().find((e) => e.event === "values")?.data;
    if (!options.stopAfter) await this.loadHistory();
    this.branch = "";
    return { events, runId, last };
  }
}
const text = (c) => (typeof c === "string" ? c : Array.isArray(c) ? c.map((b) => b.text ?? "").join("") : c);
const human = (t) => ({ id: randomUUID(), type: "human", content: [{ type: "text", text: t }] });
const names = (events) => events.map((e) => e.event);
const shownView = (v) => ({ messages: v.messages, branches: v.branches, interrupt: v.interrupt, values: v.values });
// A flow's failure is recorded with its HTTP status, not thrown: the test names what broke.
async function flow(name, f) {
  try {
    out[name] = await f();
  } catch (e) {
    out[name] = { thrown: String(e?.message ?? e).slice(0, 400), status: e?.status ?? null };
  }
}

await flow("chat", async () => {
  const ui = new Ui(chatUrl, "chat");
  const info = await ui.info();
  const before = await ui.threads();
  // Send: a new thread, one stream in the UI's modes, the history.
  const first = await ui.submit({ messages: [human("what is 6*7?")] },
    { streamMode: ["values"], streamSubgraphs: true, streamResumable: true });
  const afterFirst = ui.view();
  const listed = await ui.threads();
  const second = await ui.submit({ messages: [human("and 7*6?")] },
    { streamMode: ["values"], streamSubgraphs: true, streamResumable: true });
  const afterSecond = ui.view();
  // Edit the second question: branch from its first-seen state's parent checkpoint.
  const idx = afterSecond.messages.findIndex((m) => m.text === "and 7*6?");
  const meta = afterSecond.meta[idx];
  const edit = await ui.submit({ messages: [{ type: "human", content: "and 8*5?" }] },
    { checkpoint: meta?.firstSeenState?.parent_checkpoint, streamMode: ["values"],
      streamSubgraphs: true, streamResumable: true });
  const edited = ui.view();
  // The branch switcher: the other branch is the original question.
  const editedIdx = edited.messages.findIndex((m) => m.text === "and 8*5?");
  const options = edited.meta[editedIdx]?.branchOptions ?? [];
  ui.branch = options.find((b) => b !== edited.meta[editedIdx]?.branch) ?? "";
  const switched = shownView(ui.view());
  ui.branch = "";
  // Edit the first question: its first-seen state's parent is what the edit branches from.
  const firstMeta = edited.meta[0];
  const editFirst = await ui.submit({ messages: [{ type: "human", content: "what is 2*2?" }] },
    { checkpoint: firstMeta?.firstSeenState?.parent_checkpoint, streamMode: ["values"],
      streamSubgraphs: true, streamResumable: true });
  const editedFirst = ui.view();
  // The UI reads the newest 10 checkpoints (fetchStateHistory: true); the whole history shows
  // the first question's two branches.
  const shortHistory = ui.history;
  ui.history = await ui.client.threads.getHistory(ui.threadId, { limit: 100 });
  const firstBranchesWhole = ui.view().branches[0];
  const historyLength = ui.history.length;
  ui.history = shortHistory;
  // Regenerate the last answer: input undefined, the AI message's parent checkpoint.
  const ai = editedFirst.meta.at(-1);
  const regen = await ui.submit(undefined, { checkpoint: ai?.firstSeenState?.parent_checkpoint,
    streamMode: ["values"], streamSubgraphs: true, streamResumable: true });
  const regenerated = ui.view();
  return {
    info, before_has_none: before.length === 0, listed: listed.includes(ui.threadId),
    first: { names: names(first.events), tuples: first.events.filter((e) => e.event === "messages") },
    after_first: shownView(afterFirst), after_second: shownView(afterSecond),
    second_names: names(second.events),
    edit_parent_checkpoint: meta?.firstSeenState?.parent_checkpoint ?? null,
    edit_names: names(edit.events), edited: shownView(edited), switched,
    first_parent_checkpoint: firstMeta?.firstSeenState?.parent_checkpoint ?? null,
    edit_first_names: names(editFirst.events), edited_first: shownView(editedFirst),
    first_branches_whole: firstBranchesWhole, history_length: historyLength,
    regen_names: names(regen.events), regenerated: shownView(regenerated),
    calls: ui.calls,
  };
});

await flow("review", async () => {
  // human_review.json: its input is `topic` (Agent Chat UI's text box sends `messages`, which
  // this workflow does not take: see typed); a program on the hook submits {topic}.
  const ui = new Ui(reviewUrl, "human_review");
  const info = await ui.info();
  let typed;
  try {
    await ui.submit({ messages: [human("write about KV caches")] },
      { streamMode: ["values"], streamSubgraphs: true, streamResumable: true });
    typed = "ok";
  } catch (e) {
    typed = { status: e?.status ?? null, message: String(e?.message ?? e).slice(0, 300) };
  }
  ui.threadId = null;
  const start = await ui.submit({ topic: "KV caches" },
    { streamMode: ["values"], streamSubgraphs: true, streamResumable: true });
  const streamed = ui.view(start.last);  // the stream's last values chunk, before the history read
  const paused = ui.view();               // after it: from the head's tasks
  const thread = await ui.client.threads.get(ui.threadId);
  // The reviewer asks for a change, then approves.
  const note = await ui.submit({}, { command: { resume: "shorter, please" } });
  const again = ui.view(note.last);
  const approve = await ui.submit({}, { command: { resume: "approve" } });
  const done = ui.view();
  const after = await ui.client.threads.get(ui.threadId);
  return {
    info, typed, start_names: names(start.events), streamed: shownView(streamed),
    paused: shownView(paused), thread_status: thread.status,
    note_names: names(note.events), again: shownView(again),
    approve_names: names(approve.events), done: shownView(done), done_status: after.status,
    calls: ui.calls,
  };
});

await flow("cancel", async () => {
  // Cancel as Agent Chat UI does it (the stream's fetch aborted; the resumable run goes on),
  // then as the hook does with reconnectOnMount (runs.cancel), and the rejoin on mount.
  const ui = new Ui(chatUrl, "ticks");
  const cut = await ui.submit({}, { streamMode: ["values"], streamSubgraphs: true,
                                    streamResumable: true, stopAfter: 2 });
  const joined = [];
  for await (const e of ui.client.runs.joinStream(ui.threadId, cut.runId, { lastEventId: "-1" }))
    joined.push({ event: e.event, data: e.data });
  const kept = await ui.client.runs.get(ui.threadId, cut.runId);
  const ui2 = new Ui(chatUrl, "slow");
  const s = await ui2.submit({}, { streamMode: ["values"], streamSubgraphs: true,
                                   streamResumable: true, stopAfter: 2 });
  await ui2.client.runs.cancel(ui2.threadId, s.runId, true);
  const cancelled = await ui2.client.runs.get(ui2.threadId, s.runId);
  await ui2.loadHistory();
  const thread = await ui2.client.threads.get(ui2.threadId);
  return { cut_names: names(cut.events), joined_names: names(joined), joined_last: joined.at(-1)?.data,
           kept_status: kept.status, cancelled_status: cancelled.status,
           thread_status: thread.status, calls: [...ui.calls, ...ui2.calls] };
});

// samples/crews/research_crew.json, served as a workflow of one crew node: the UI's text box is
// the crew's topic, and each agent's answer is a message of the conversation; a second question
// runs the crew again on the same thread.
if (crewUrl) await flow("crew", async () => {
  const ui = new Ui(crewUrl, "research_crew");
  const info = await ui.info();
  const first = await ui.submit({ messages: [human("paged attention")] },
    { streamMode: ["values"], streamSubgraphs: true, streamResumable: true });
  const afterFirst = ui.view();
  const second = await ui.submit({ messages: [human("kv cache eviction")] },
    { streamMode: ["values"], streamSubgraphs: true, streamResumable: true });
  const afterSecond = ui.view();
  const state = await ui.client.threads.getState(ui.threadId);
  const shown = (v) => v.messages.map((m) => ({ type: m.type, text: m.text, id: m.id }));
  return {
    info, first_names: names(first.events), second_names: names(second.events),
    tuples: first.events.filter((e) => e.event === "messages").map((e) => e.data),
    after_first: shown(afterFirst), after_second: shown(afterSecond),
    names: state.values.messages.map((m) => m.name), result: state.values.result,
    thread_status: (await ui.client.threads.get(ui.threadId)).status,
  };
});

process.stdout.write(JSON.stringify(out) + "\n");
