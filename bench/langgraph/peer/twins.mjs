// The reference server's copies of the other graphs of tests/langgraph/workflows that the
// differential suite (tests/langgraph/clients/diff_flows.mjs) runs on both servers: the same
// channels, nodes, edges and writes, so that what a client sees can be compared. Each says which
// workflow file it copies; keep them in step with those files.
import { Annotation, MessagesAnnotation, StateGraph, START, END, interrupt } from "@langchain/langgraph";
import { AIMessage, ToolMessage } from "@langchain/core/messages";

const last = (_, b) => b;

// ask.json: an interrupt node whose answer goes to `answer`, then `after`. LangGraph refuses a
// node named like a channel, so ask.json's node `after` is `after_` here (diff_flows.mjs maps the
// name back).
export const ask = new StateGraph(Annotation.Root({
  question: Annotation({ reducer: last, default: () => "ok?" }),
  answer: Annotation({ reducer: last }),
  after: Annotation({ reducer: last, default: () => false }),
}))
  .addNode("ask", (s) => ({ answer: interrupt({ question: s.question }) }))
  .addNode("after_", () => ({ after: true }))
  .addEdge(START, "ask").addEdge("ask", "after_").addEdge("after_", END)
  .compile();

// chat.json: a tool call and its result, then a reply, appended to `messages`. weir's workflow
// writes the messages without ids; the reference server gives each a uuid (ids are normalised).
export const chat = new StateGraph(MessagesAnnotation)
  .addNode("call", () => ({ messages: [
    new AIMessage({ content: "", tool_calls: [{ id: "call_1", name: "calculator", args: { expression: "6*7" } }] }),
    new ToolMessage({ content: "42", name: "calculator", tool_call_id: "call_1" })] }))
  .addNode("reply", () => ({ messages: [new AIMessage({ content: "It is 42." })] }))
  .addEdge(START, "call").addEdge("call", "reply").addEdge("reply", END)
  .compile();

// boom.json: a node whose tool fails; the run ends in error.
export const boom = new StateGraph(Annotation.Root({ out: Annotation({ reducer: last }) }))
  .addNode("broken", () => { throw new Error("calculator: unexpected end of expression at column 4"); })
  .addEdge(START, "broken").addEdge("broken", END)
  .compile();

// ticks.json: naps 100 ms, counts, 4 times.
export const ticks = new StateGraph(Annotation.Root({
  n: Annotation({ reducer: (a, b) => a + b, default: () => 0 }),
  slept: Annotation({ reducer: last }),
}))
  .addNode("nap", async () => { await new Promise((r) => setTimeout(r, 100)); return { slept: 100 }; })
  .addNode("tick", () => ({ n: 1 }))
  .addEdge(START, "nap").addEdge("nap", "tick")
  .addConditionalEdges("tick", (s) => (s.n >= 4 ? END : "nap"), [END, "nap"])
  .compile();
