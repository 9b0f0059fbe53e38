// Drives `weir serve`'s store routes with the official JS client, as a user's program would
// (putItem, getItem, searchItems with a prefix and a filter, listNamespaces, deleteItem, a
// missing item), and prints what it saw as one JSON object (tests/langgraph/langgraph_store_test.cpp
// checks it). Usage: node store_flows.mjs http://127.0.0.1:PORT [API_KEY]
import { Client } from "@langchain/langgraph-sdk";

const [apiUrl, apiKey] = process.argv.slice(2);
const client = new Client({ apiUrl, apiKey: apiKey ?? null });
const store = client.store;
const out = {};

// A call's failure is recorded with its HTTP status, not thrown: the test names what broke.
const caught = async (f) => {
  try {
    await f();
    return { thrown: null };
  } catch (e) {
    return { thrown: String(e?.message ?? e), status: e?.status ?? null };
  }
};
const keys = (r) => r.items.map((i) => i.key);

try {
  out.put = (await store.putItem(["users", "u1"], "prefs", { theme: "dark", lang: "en" })) ?? null;
  await store.putItem(["users", "u2"], "prefs", { theme: "light" });
  await store.putItem(["users", "u1", "memories"], "m1", { kind: "fact", text: "likes tea" });
  await store.putItem(["users", "u1", "memories"], "m2", { kind: "pref", text: "short answers" });
  out.got = await store.getItem(["users", "u1"], "prefs");
  out.prefix_keys = keys(await store.searchItems(["users", "u1"]));
  out.filtered_keys = keys(await store.searchItems(["users"], { filter: { kind: "fact" } }));
  out.paged_keys = keys(await store.searchItems(["users", "u1", "memories"], { limit: 1, offset: 1 }));
  out.namespaces = (await store.listNamespaces({ prefix: ["users"] })).namespaces;
  out.memories = (await store.listNamespaces({ suffix: ["memories"] })).namespaces;
  out.depth1 = (await store.listNamespaces({ maxDepth: 1 })).namespaces;
  await store.deleteItem(["users", "u1"], "prefs");
  out.deleted = await caught(() => store.getItem(["users", "u1"], "prefs"));
  out.missing = await caught(() => store.getItem(["nobody"], "nothing"));
  out.bad_label = await caught(() => store.putItem(["a.b"], "k", {}));
  out.query = await caught(() => store.searchItems(["users"], { query: "tea" }));
} catch (e) {
  out.thrown = String(e?.message ?? e);
}
console.log(JSON.stringify(out));
