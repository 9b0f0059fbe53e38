// The official TypeScript SDK's client driving `weir mcp`: lists the tools and calls two.
// usage: node sdk_client.mjs WEIR_BINARY WORKFLOWS_DIR   (prints one JSON object)
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";

const [weir, workflows] = process.argv.slice(2);
const transport = new StdioClientTransport({
  command: weir,
  args: ["mcp", "--tools", "calculator", "--workflows", workflows],
});
const client = new Client({ name: "weir-sdk-test", version: "1.0.0" });
await client.connect(transport);
const tools = await client.listTools();
const calc = await client.callTool({ name: "calculator", arguments: { expression: "2^10" } });
const greet = await client.callTool({ name: "greet", arguments: { who: "SDK" } });
console.log(JSON.stringify({
  version: client.getServerVersion(),
  tools: tools.tools.map((t) => t.name),
  calculator: calc.content[0].text,
  greet: greet.content[0].text,
}));
await client.close();
