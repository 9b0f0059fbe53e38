// An MCP server on the official TypeScript SDK's Streamable HTTP transport (stateful sessions,
// answers streamed as SSE), for weir's HTTP MCP client. Listens on 127.0.0.1 and a free port,
// prints "listening on PORT", serves until killed.
// usage: node http_server.mjs [--json]   (--json: answers as JSON bodies instead of SSE)
// Tools: add {a, b} -> the sum as text; slow {ms} -> "slept" after ms milliseconds, sending a
// progress notification on the stream first.
import { randomUUID } from "node:crypto";
import { createServer } from "node:http";
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { StreamableHTTPServerTransport } from "@modelcontextprotocol/sdk/server/streamableHttp.js";
import { isInitializeRequest } from "@modelcontextprotocol/sdk/types.js";
import { z } from "zod";

const json = process.argv.includes("--json");
const transports = new Map();

function makeServer() {
  const server = new McpServer(
    { name: "sdk-http-peer", version: "1.0.0" },
    { capabilities: { logging: {} } },
  );
  server.tool("add", "adds two numbers", { a: z.number(), b: z.number() }, async ({ a, b }) => ({
    content: [{ type: "text", text: String(a + b) }],
  }));
  server.tool("slow", "sleeps ms milliseconds", { ms: z.number() }, async ({ ms }, extra) => {
    await extra.sendNotification({
      method: "notifications/message",
      params: { level: "info", data: "sleeping" },
    });
    await new Promise((resolve) => setTimeout(resolve, ms));
    return { content: [{ type: "text", text: "slept" }] };
  });
  return server;
}

async function readBody(req) {
  const chunks = [];
  for await (const c of req) chunks.push(c);
  const text = Buffer.concat(chunks).toString("utf8");
  return text ? JSON.parse(text) : undefined;
}

const http = createServer(async (req, res) => {
  try {
    const sid = req.headers["mcp-session-id"];
    const body = req.method === "POST" ? await readBody(req) : undefined;
    let transport = sid ? transports.get(sid) : undefined;
    if (!transport) {
      if (sid || req.method !== "POST" || !isInitializeRequest(body)) {
        res.writeHead(sid ? 404 : 400, { "Content-Type": "application/json" });
        res.end(JSON.stringify({ jsonrpc: "2.0", id: null,
                                 error: { code: -32000, message: sid ? "Session not found" : "Bad Request" } }));
        return;
      }
      transport = new StreamableHTTPServerTransport({
        sessionIdGenerator: () => randomUUID(),
        enableJsonResponse: json,
        onsessioninitialized: (id) => transports.set(id, transport),
      });
      transport.onclose = () => transport.sessionId && transports.delete(transport.sessionId);
      await makeServer().connect(transport);
    }
    await transport.handleRequest(req, res, body);
  } catch (e) {
    if (!res.headersSent) res.writeHead(500);
    res.end(String(e));
  }
});
http.listen(0, "127.0.0.1", () => {
  console.log(`listening on ${http.address().port}`);
});
