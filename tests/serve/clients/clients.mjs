// The official clients against `weir serve`: the `openai` package (create, and the stream
// helper that assembles tool-call deltas) and LangChain.js (ChatOpenAI.bindTools, invoke and
// the concatenation of streamed chunks). Each case asks for a tool call with tool_choice
// "required" or a named function and a small max_tokens, or JSON with response_format and
// stop sequences, and reports what the client assembled.
// usage: node clients.mjs BASE_URL MODEL MAX_TOKENS
// Prints one JSON object.
import OpenAI from "openai";
import { ChatOpenAI } from "@langchain/openai";

const [baseURL, model, maxTokensText] = process.argv.slice(2);
const maxTokens = Number(maxTokensText);
const tools = [
  {
    type: "function",
    function: {
      name: "weather",
      description: "The weather in a city.",
      parameters: {
        type: "object",
        properties: { city: { type: "string" }, days: { type: "integer", minimum: 1 } },
        required: ["city"],
        additionalProperties: false,
      },
    },
  },
  {
    type: "function",
    function: {
      name: "search",
      description: "Searches the web.",
      parameters: {
        type: "object",
        properties: { q: { type: "string" } },
        required: ["q"],
        additionalProperties: false,
      },
    },
  },
];
const messages = [{ role: "user", content: "What is the weather in Paris?" }];
const calls = (list) =>
  (list ?? []).map((c) => ({ id: c.id, type: c.type, name: c.function.name, arguments: c.function.arguments }));

const client = new OpenAI({ baseURL, apiKey: "unused", maxRetries: 0 });
const out = {};

// 1. create, tool_choice required.
{
  const r = await client.chat.completions.create({
    model, messages, tools, tool_choice: "required", max_tokens: maxTokens, temperature: 1, seed: 1,
  });
  const c = r.choices[0];
  out.create = { finish: c.finish_reason, content: c.message.content, calls: calls(c.message.tool_calls) };
}

// 2. the stream helper, a named function: it assembles the deltas and reports each call's
// arguments when they are done.
{
  const done = [];
  const s = client.chat.completions.stream({
    model, messages, tools, tool_choice: { type: "function", function: { name: "weather" } },
    max_tokens: maxTokens, temperature: 1, seed: 2,
  });
  s.on("tool_calls.function.arguments.done", (e) => done.push({ name: e.name, arguments: e.arguments }));
  const r = await s.finalChatCompletion();
  const c = r.choices[0];
  out.stream = { finish: c.finish_reason, content: c.message.content, calls: calls(c.message.tool_calls), done };
}

// 3. JSON with response_format and stop sequences that occur inside every value.
{
  const schema = {
    type: "object",
    properties: { name: { type: "string" }, age: { type: "integer" } },
    required: ["name", "age"],
    additionalProperties: false,
  };
  const r = await client.chat.completions.create({
    model, messages, max_tokens: maxTokens, temperature: 1, seed: 3, stop: [",", "\"", ":"],
    response_format: { type: "json_schema", json_schema: { name: "person", strict: true, schema } },
  });
  out.json = { finish: r.choices[0].finish_reason, content: r.choices[0].message.content };
}

// 4. LangChain.js: bindTools with tool_choice required, invoke and stream.
{
  const llm = new ChatOpenAI({
    model, apiKey: "unused", configuration: { baseURL }, maxTokens, temperature: 1, maxRetries: 0,
  });
  const bound = llm.bindTools(tools, { tool_choice: "required" });
  const msg = await bound.invoke("What is the weather in Paris?");
  out.langchain = { finish: msg.response_metadata?.finish_reason, calls: msg.tool_calls, invalid: msg.invalid_tool_calls };
  let acc;
  for await (const chunk of await bound.stream("What is the weather in Paris?"))
    acc = acc === undefined ? chunk : acc.concat(chunk);
  out.langchain_stream = {
    finish: acc?.response_metadata?.finish_reason, calls: acc?.tool_calls, invalid: acc?.invalid_tool_calls,
  };
}

console.log(JSON.stringify(out));
