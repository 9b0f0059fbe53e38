// The reference server's copy of tests/langgraph/workflows/steps.json: three nodes in a row.
import { Annotation, StateGraph, START, END } from "@langchain/langgraph";

const State = Annotation.Root({
  topic: Annotation({ reducer: (_, b) => b, default: () => "" }),
  seen: Annotation({ reducer: (a, b) => a.concat(b), default: () => [] }),
  done: Annotation({ reducer: (_, b) => b, default: () => false }),
});

export const steps = new StateGraph(State)
  .addNode("first", (s) => ({ seen: ["first " + s.topic] }))
  .addNode("second", () => ({ seen: ["second"] }))
  .addNode("third", () => ({ done: true }))
  .addEdge(START, "first").addEdge("first", "second").addEdge("second", "third")
  .addEdge("third", END)
  .compile();
