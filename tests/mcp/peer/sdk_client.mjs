// The official TypeScript SDK's client driving weir's MCP server: lists the tools and calls two.
// usage: node sdk_client.mjs WEIR_BINARY WORKFLOWS_DIR   (`weir mcp` over stdio)
//        node sdk_client.mjs --url http://127.0.0.1:PORT/mcp   (`weir serve`, Streamable HTTP)
// Prints one JSON object.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const args = process.argv.slice(2);
const http = args[0] === "--url";
const transport = http
  ? new StreamableHTTPClientTransport(new URL(args[1]))
  : new StdioClientTransport({
      command: args[0],
      args: ["mcp", "--tools", "calculator", "--workflows", args[1]],
    });
const client = new Client({ name: "weir-sdk-test", version: "1.0.0" });
await client.connect(transport);
const tools = await client.listTools();
const calc = await client.callTool({ name: "calculator", arguments: { expression: "2^10" } });
const greet = await client.callTool({ name: "greet", arguments: { who: "SDK" } });
const out = {
  version: client.getServerVersion(),
  tools: tools.tools.map((t) => t.name),
  calculator: calc.content[0].text,
  greet: greet.content[0].text,
};
if (http) {
  out.session = transport.sessionId ?? null;
  await transport.terminateSession();
}
console.log(JSON.stringify(out));
await client.close();
