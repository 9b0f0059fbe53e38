// A reply streamed token by token, as the official JS client's UI helpers join it: the `talk`
// workflow (an llm node answering in the messages channel) streamed in messages-tuple and
// values, each `messages` event fed to the SDK's MessageTupleManager (what useStream does), and
// the joined message compared with the one the thread stored. Prints one JSON object
// (tests/langgraph/langgraph_stream_test.cpp checks it). Usage: node token_flows.mjs URL
import { Client } from "@langchain/langgraph-sdk";
import { MessageTupleManager, toMessageDict } from "@langchain/langgraph-sdk/ui";

const [apiUrl] = process.argv.slice(2);
const client = new Client({ apiUrl, apiKey: null });
const out = {};
try {
  const thread = (await client.threads.create()).thread_id;
  const tuples = new MessageTupleManager();
  let chunks = 0, last = null, id = null;
  for await (const e of client.runs.stream(thread, "talk", {
    input: { messages: [{ type: "human", content: "Tell me a story" }] },
    streamMode: ["messages-tuple", "values"] })) {
    if (e.event === "messages") {
      if (e.data[0].type === "AIMessageChunk") chunks += 1;
      id = tuples.add(e.data[0], e.data[1]) ?? id;
    } else if (e.event === "values") {
      last = e.data;
    }
  }
  const joined = toMessageDict(tuples.get(id).chunk);
  const state = await client.threads.getState(thread);
  const stored = state.values.messages.at(-1);
  Object.assign(out, { chunks, joined_type: joined.type, joined_id: joined.id, stored_id: stored.id,
                       same_text: joined.content === stored.content && stored.content.length > 0,
                       values_text_same: last.messages.at(-1).content === stored.content });
} catch (e) {
  out.thrown = String(e?.message ?? e).slice(0, 400);
}
process.stdout.write(JSON.stringify(out) + "\n");
