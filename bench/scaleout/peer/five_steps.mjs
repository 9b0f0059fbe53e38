// bench/scaleout's peer: LangGraph.js with its PostgreSQL checkpointer running the same graph as
// bench/scaleout/five_steps.json (five nodes in a chain, each awaiting a 20 ms sleep as a stand-in
// for a model call; state topic, a-e; each node writes the milliseconds it waited, as weir's
// `sleep` tool returns them).
//
//   node five_steps.mjs --db URL --setup
//       create the checkpointer's tables (PostgresSaver.setup()) and exit, so that the timed
//       part below does not include them (weir's schema is made before its clock starts too)
//   node five_steps.mjs --db URL --runs N [--concurrency 8] [--tag T] [--durability sync]
//                       [--warmup M] [--go]
//       N runs, each on its own thread_id (T-i) with the input {"topic": "T-i"}, at most
//       `concurrency` in flight at once (a run starts as soon as one ends, like a weir worker's
//       --max-runs slots); one process, one pg.Pool of `concurrency` connections, opened before
//       the first run. --warmup M: M runs first (threads T-warmup-i), not counted, so that V8's
//       JIT has compiled the hot paths. With --go it prints "ready" once the pool is open and
//       the warm-up done, and starts the runs when a line arrives on stdin (bench/scaleout/run
//       starts several processes together).
//
// Prints one JSON line: {"runs", "succeeded", "seconds", "started_ms", "ended_ms", "runs_s",
// "cpu_ms", "durability", "concurrency"}; seconds = from the first run's start to the last run's
// end (started_ms, ended_ms: the same as Unix milliseconds); cpu_ms: this process's CPU over
// those runs (user + system). A run counts as succeeded when its final state holds all five
// outputs. Exit status 1 when any run failed.
//
// durability "sync" (the default here) commits each step's checkpoint before the next step
// starts: weir's guarantee (a put returns once committed). LangGraph's own default is "async"
// (the put overlaps the next step); pass --durability async to measure that.
import { Annotation, StateGraph, START, END } from "@langchain/langgraph";
import { PostgresSaver } from "@langchain/langgraph-checkpoint-postgres";
import pg from "pg";

function parseArgs(argv) {
  const args = {
    runs: 0, concurrency: 8, tag: "peer", durability: "sync", warmup: 0, setup: false, go: false,
  };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    const next = () => {
      if (i + 1 >= argv.length) throw new Error(`${a} needs a value`);
      return argv[++i];
    };
    if (a === "--db") args.db = next();
    else if (a === "--runs") args.runs = Number(next());
    else if (a === "--concurrency") args.concurrency = Number(next());
    else if (a === "--tag") args.tag = next();
    else if (a === "--durability") args.durability = next();
    else if (a === "--setup") args.setup = true;
    else if (a === "--go") args.go = true;
    else if (a === "--warmup") args.warmup = Number(next());
    else throw new Error(`unknown argument ${a}`);
  }
  if (!args.db) throw new Error("--db URL is required");
  if (!args.setup && !(args.runs > 0)) throw new Error("--runs N (N > 0) is required");
  if (!(args.concurrency > 0)) throw new Error("--concurrency must be > 0");
  if (!(args.warmup >= 0)) throw new Error("--warmup must be >= 0");
  if (!["sync", "async", "exit"].includes(args.durability)) {
    throw new Error("--durability is sync, async or exit");
  }
  return args;
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

// The stub model: wait `ms`, return the milliseconds waited (weir's `sleep` tool).
async function model(ms) {
  const t = performance.now();
  await sleep(ms);
  return Math.round(performance.now() - t);
}

const last = (_, b) => b;
const State = Annotation.Root({
  topic: Annotation({ reducer: last, default: () => "" }),
  a: Annotation({ reducer: last, default: () => null }),
  b: Annotation({ reducer: last, default: () => null }),
  c: Annotation({ reducer: last, default: () => null }),
  d: Annotation({ reducer: last, default: () => null }),
  e: Annotation({ reducer: last, default: () => null }),
});

function fiveSteps(checkpointer) {
  return new StateGraph(State)
    .addNode("plan", async () => ({ a: await model(20) }))
    .addNode("research", async () => ({ b: await model(20) }))
    .addNode("draft", async () => ({ c: await model(20) }))
    .addNode("review", async () => ({ d: await model(20) }))
    .addNode("publish", async () => ({ e: await model(20) }))
    .addEdge(START, "plan")
    .addEdge("plan", "research")
    .addEdge("research", "draft")
    .addEdge("draft", "review")
    .addEdge("review", "publish")
    .addEdge("publish", END)
    .compile({ checkpointer });
}

async function main() {
  const args = parseArgs(process.argv.slice(2));
  const pool = new pg.Pool({ connectionString: args.db, max: args.concurrency });
  const checkpointer = new PostgresSaver(pool);
  try {
    if (args.setup) {
      await checkpointer.setup();
      return 0;
    }
    const graph = fiveSteps(checkpointer);
    // `count` runs tagged `${prefix}-i`, `concurrency` in flight: a lane takes the next run as
    // soon as its last one ended.
    const batch = async (prefix, count) => {
      let next = 0;
      let succeeded = 0;
      const errors = [];
      const lane = async () => {
        while (next < count) {
          const id = `${prefix}-${next++}`;
          try {
            const out = await graph.invoke(
              { topic: id },
              { configurable: { thread_id: id }, durability: args.durability },
            );
            if (["a", "b", "c", "d", "e"].every((k) => typeof out[k] === "number")) succeeded++;
            else errors.push(`${id}: final state ${JSON.stringify(out)}`);
          } catch (e) {
            errors.push(`${id}: ${e && e.stack ? e.stack : e}`);
          }
        }
      };
      await Promise.all(Array.from({ length: Math.min(args.concurrency, count) }, lane));
      return { succeeded, errors };
    };
    // Open the pool's connections now (a weir worker connects before it claims a run), and warm
    // the JIT up (weir is compiled ahead of time) on runs of their own threads.
    const clients = await Promise.all(
      Array.from({ length: args.concurrency }, () => pool.connect()),
    );
    for (const c of clients) c.release();
    if (args.warmup > 0) {
      const warm = await batch(`${args.tag}-warmup`, args.warmup);
      if (warm.errors.length > 0) throw new Error(`a warm-up run failed: ${warm.errors[0]}`);
    }
    if (args.go) {
      console.log("ready");
      await new Promise((resolve) => process.stdin.once("data", resolve));
      process.stdin.pause();
    }
    const cpu0 = process.cpuUsage();
    const t0 = performance.now();
    const { succeeded, errors } = await batch(args.tag, args.runs);
    const t1 = performance.now();
    const cpu = process.cpuUsage(cpu0);
    const seconds = (t1 - t0) / 1000;
    for (const e of errors.slice(0, 5)) console.error(`five_steps.mjs: run failed: ${e}`);
    console.log(
      JSON.stringify({
        runs: args.runs,
        succeeded,
        seconds: Number(seconds.toFixed(3)),
        started_ms: Math.round(performance.timeOrigin + t0),
        ended_ms: Math.round(performance.timeOrigin + t1),
        runs_s: Number((succeeded / seconds).toFixed(1)),
        cpu_ms: Math.round((cpu.user + cpu.system) / 1000),
        durability: args.durability,
        concurrency: args.concurrency,
      }),
    );
    return succeeded === args.runs ? 0 : 1;
  } finally {
    await pool.end();
  }
}

main().then(
  (code) => process.exit(code),
  (e) => {
    console.error(`five_steps.mjs: ${e && e.stack ? e.stack : e}`);
    process.exit(2);
  },
);
