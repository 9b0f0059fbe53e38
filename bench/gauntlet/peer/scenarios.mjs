// The gauntlet's peer: each scenario written the way the OOM write-ups' "broken" pattern does
// it in LangGraph.js, with the same stub model as weir's side (a node that returns a
// fixed-size reply after a fixed delay). Prints one JSON object per run on its last line.
//
//   node scenarios.mjs fanout   --n 10000 --delay-ms 5 --reply-bytes 2048
//   node scenarios.mjs history  --turns 1000 --delay-ms 1 --reply-bytes 512
//   node scenarios.mjs dumptruck --turns 100 --docs 20 --doc-bytes 204800
import { Annotation, END, MemorySaver, START, StateGraph } from "@langchain/langgraph";

const args = Object.fromEntries(
  process.argv.slice(3).reduce((acc, a, i, all) => (a.startsWith("--") ? [...acc, [a.slice(2), all[i + 1]]] : acc), []),
);
const num = (k, d) => (args[k] === undefined ? d : Number(args[k]));
const scenario = process.argv[2];

// RSS sampled every 20 ms (the same method as weir's side), kept as a time series for the
// gauntlet's plots: {"t": [s...], "rss_mb": [...]}.
const baseline = process.memoryUsage().rss;
const start = performance.now();
let peak = baseline;
const series = { t: [], rss_mb: [] };
const sample = () => {
  const r = process.memoryUsage().rss;
  if (r > peak) peak = r;
  series.t.push(Math.round(performance.now() - start) / 1000);
  series.rss_mb.push(Math.round((r / (1 << 20)) * 100) / 100);
};
sample();
const sampler = setInterval(sample, 20);
// At most `max` points, evenly thinned (the same as weir's side).
const thin = (s, max = 600) => {
  const stride = Math.max(1, Math.ceil(s.t.length / max));
  return { t: s.t.filter((_, i) => i % stride === 0), rss_mb: s.rss_mb.filter((_, i) => i % stride === 0) };
};
// Progress on stderr, one JSON line at a time, so that the gauntlet can tell how far a run got
// when its memory guard had to stop it.
const progress = (done) =>
  process.stderr.write(JSON.stringify({ progress: done, t: (performance.now() - start) / 1000 }) + "\n");
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const reply = (n) => "x".repeat(n);
const mb = (b) => Math.round((b / (1 << 20)) * 10) / 10;

async function fanout() {
  // 10,000 invocations of a 3-node agent chain submitted at once: no admission limit.
  const n = num("n", 10000), delay = num("delay-ms", 5), bytes = num("reply-bytes", 2048);
  const State = Annotation.Root({
    input: Annotation(),
    plan: Annotation(),
    answer: Annotation(),
  });
  const model = async (s) => {
    await sleep(delay);
    return reply(bytes);
  };
  const g = new StateGraph(State)
    .addNode("planner", async (s) => ({ plan: await model(s) }))
    .addNode("actor", async (s) => ({ answer: await model(s) }))
    .addNode("reporter", async (s) => ({ answer: s.answer.slice(0, 16) }))
    .addEdge(START, "planner").addEdge("planner", "actor").addEdge("actor", "reporter").addEdge("reporter", END)
    .compile();
  const t0 = performance.now();
  let settled = 0;
  const results = await Promise.allSettled(
    Array.from({ length: n }, (_, i) =>
      g.invoke({ input: `task ${i}` }).finally(() => ++settled % 100 === 0 && progress(settled))),
  );
  const elapsed = (performance.now() - t0) / 1000;
  const completed = results.filter((r) => r.status === "fulfilled").length;
  return { completed, failed: n - completed, n, elapsed_s: elapsed, runs_per_s: completed / elapsed,
           throughput: completed / elapsed, throughput_unit: "runs/s" };
}

async function history() {
  // One conversation; every message is appended to state and checkpointed (MemorySaver).
  const turns = num("turns", 1000), delay = num("delay-ms", 1), bytes = num("reply-bytes", 512);
  const State = Annotation.Root({
    messages: Annotation({ reducer: (a, b) => a.concat(b), default: () => [] }),
  });
  const g = new StateGraph(State)
    .addNode("model", async (s) => {
      const prompt = JSON.stringify(s.messages); // the whole history goes into every prompt
      await sleep(delay);
      return { messages: [{ role: "assistant", content: reply(bytes), prompt_chars: prompt.length }] };
    })
    .addEdge(START, "model").addEdge("model", END)
    .compile({ checkpointer: new MemorySaver() });
  const cfg = { configurable: { thread_id: "chat" } };
  const lat = [];
  const t0 = performance.now();
  for (let t = 1; t <= turns; t++) {
    const s = performance.now();
    await g.invoke({ messages: [{ role: "user", content: `turn ${t}: ` + reply(bytes) }] }, cfg);
    lat.push(performance.now() - s);
    progress(t);
  }
  const elapsed = (performance.now() - t0) / 1000;
  const avg = (a, b) => lat.slice(a, b).reduce((x, y) => x + y, 0) / Math.max(1, lat.slice(a, b).length);
  // As on weir's side: the median of the 10 turns around turn 10 and of the last 10 (means too).
  const median = (a, b) => {
    const v = lat.slice(a, b).sort((x, y) => x - y);
    return v.length ? v[Math.floor(v.length / 2)] : 0;
  };
  return { completed: turns, elapsed_s: elapsed, throughput: turns / elapsed, throughput_unit: "turns/s",
           turn10_ms: median(5, 15), last_turn_ms: median(turns - 10, turns),
           latency_ratio_last_vs_10: median(turns - 10, turns) / median(5, 15),
           latency_ratio_last_vs_10_means: avg(turns - 10, turns) / avg(5, 15) };
}

async function dumptruck() {
  // A retrieval node returns 20 documents of 200 KB every turn; they are kept in state.
  const turns = num("turns", 100), docs = num("docs", 20), docBytes = num("doc-bytes", 204800);
  const State = Annotation.Root({
    query: Annotation(),
    documents: Annotation({ reducer: (a, b) => a.concat(b), default: () => [] }),
    answer: Annotation(),
  });
  const saver = new MemorySaver();
  const g = new StateGraph(State)
    .addNode("retrieve", async (s) => ({
      documents: Array.from({ length: docs }, (_, i) => ({ id: `${s.query}-${i}`, text: reply(docBytes) })),
    }))
    .addNode("respond", async (s) => ({ answer: `read ${s.documents.length} documents` }))
    .addEdge(START, "retrieve").addEdge("retrieve", "respond").addEdge("respond", END)
    .compile({ checkpointer: saver });
  const cfg = { configurable: { thread_id: "rag" } };
  const t0 = performance.now();
  let lastCheckpointBytes = 0;
  for (let t = 0; t < turns; t++) {
    await g.invoke({ query: `q${t}` }, cfg);
    progress(t + 1);
  }
  const cp = await saver.getTuple(cfg);
  lastCheckpointBytes = JSON.stringify(cp.checkpoint).length;
  const elapsed = (performance.now() - t0) / 1000;
  return { completed: turns, elapsed_s: elapsed, throughput: turns / elapsed, throughput_unit: "turns/s",
           last_checkpoint_bytes: lastCheckpointBytes };
}

const run = { fanout, history, dumptruck }[scenario];
if (!run) {
  console.error(`unknown scenario '${scenario}' (fanout, history, dumptruck)`);
  process.exit(1);
}
const out = await run();
clearInterval(sampler);
sample();
console.log(JSON.stringify({ scenario, peer: "langgraph.js", baseline_rss_mb: mb(baseline), peak_rss_mb: mb(peak),
                             peak_above_baseline_mb: mb(peak - baseline), ...out, series: thin(series) }));
