// Starts the reference LangGraph server (@langchain/langgraph-api, in memory) with graph.mjs
// (bench_langgraph's graph) and twins.mjs (the differential suite's) on 127.0.0.1:PORT; prints
// READY when it serves. Its data goes to DIR/.langgraph_api/: give a fresh temporary folder. Usage: node serve.mjs PORT DIR
import { startServer } from "@langchain/langgraph-api/server";
import path from "node:path";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
await startServer({
  port: Number(process.argv[2]), host: "127.0.0.1", nWorkers: 64, cwd: process.argv[3],
  graphs: {
    steps: path.join(here, "graph.mjs") + ":steps",
    ...Object.fromEntries(["ask", "boom", "chat", "ticks"].map(
      (g) => [g, path.join(here, "twins.mjs") + ":" + g])),
  },
});
console.log("READY");
