// A closed loop of LangGraph SDK clients: at each concurrency, that many clients call
// runs.wait (a stateless run of the graph) back to back for SECONDS; prints one JSON object
// {"<concurrency>": {"runs", "runs_per_s", "p50_ms", "p99_ms", "errors", "first_error"}}.
// Usage: node bench.mjs URL GRAPH SECONDS CONCURRENCY[,CONCURRENCY...]
import { Client } from "@langchain/langgraph-sdk";

const [url, graph, seconds, levels] = process.argv.slice(2);
const client = new Client({ apiUrl: url, apiKey: null });
const out = {};
for (const c of levels.split(",").map(Number)) {
  const lat = [];
  let errors = 0, firstError = null;
  const until = performance.now() + Number(seconds) * 1000;
  const t0 = performance.now();
  await Promise.all(Array.from({ length: c }, async (_, i) => {
    while (performance.now() < until) {
      const t = performance.now();
      try {
        await client.runs.wait(null, graph, { input: { topic: `t${i}` } });
        lat.push(performance.now() - t);
      } catch (e) {
        errors++;
        firstError ??= String(e?.message ?? e).slice(0, 300);
      }
    }
  }));
  const wall = (performance.now() - t0) / 1000;
  lat.sort((a, b) => a - b);
  const q = (p) => (lat.length ? lat[Math.min(lat.length - 1, Math.floor(p * lat.length))] : null);
  out[c] = { runs: lat.length, runs_per_s: lat.length / wall, p50_ms: q(0.5), p99_ms: q(0.99),
             errors, first_error: firstError };
}
process.stdout.write(JSON.stringify(out) + "\n");
