#!/usr/bin/env python3
"""A small MCP server over stdio for weir's tests: well-behaved tools and misbehaving ones.

Environment:
  FAKE_LOG         append every message received to this file (one line each)
  FAKE_VERSION     the protocolVersion to answer (default: the client's)
  FAKE_PAGE        tools per tools/list page (default 2: the listing paginates)
  FAKE_BAD_SCHEMA  1: also list a tool whose inputSchema uses a back-reference
  FAKE_ENV_TOOL    1: also list `env`, which answers the server's environment as a JSON object
Tools: echo, add, fail (isError), hang (never answers), garbage (answers a line that is not
JSON), die (exits mid-call), flood (a line of `bytes` bytes), image, structured, ping_me
(the server pings weir and sends an unknown request first), add_tool (list_changed).
"""
import base64, json, os, sys

log_path = os.environ.get("FAKE_LOG")
page = int(os.environ.get("FAKE_PAGE", "2"))
S = {"type": "object"}
tools = [
    {"name": "echo", "description": "echoes", "inputSchema": {"type": "object", "properties": {"message": {"type": "string"}}, "required": ["message"]}},
    {"name": "add", "description": "adds", "inputSchema": {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}, "required": ["a", "b"]}},
    {"name": "fail", "inputSchema": S}, {"name": "hang", "inputSchema": S},
    {"name": "garbage", "inputSchema": S}, {"name": "die", "inputSchema": S},
    {"name": "flood", "inputSchema": {"type": "object", "properties": {"bytes": {"type": "integer"}}}},
    {"name": "image", "inputSchema": S}, {"name": "structured", "inputSchema": S},
    {"name": "ping_me", "inputSchema": S}, {"name": "add_tool", "inputSchema": S},
]
if os.environ.get("FAKE_ENV_TOOL") == "1":
    tools.append({"name": "env", "inputSchema": S})
if os.environ.get("FAKE_META_TOOL") == "1":  # answers with the request's params._meta
    tools.append({"name": "meta", "inputSchema": S})
if os.environ.get("FAKE_BAD_SCHEMA") == "1":
    tools.append({"name": "backref", "inputSchema": {"type": "object", "properties": {"s": {"type": "string", "pattern": "(a)\\1"}}}})

out = sys.stdout


def send(obj):
    out.write(json.dumps(obj) + "\n")
    out.flush()


def result(id_, res):
    send({"jsonrpc": "2.0", "id": id_, "result": res})


def text(id_, t, is_error=False):
    result(id_, {"content": [{"type": "text", "text": t}], "isError": is_error})


sys.stderr.write("fake server starting\n")
sys.stderr.flush()
waiting_ping = None  # the ping_me call waiting for weir's answers
answers = {}
for raw in sys.stdin:
    if log_path:
        with open(log_path, "a") as f:
            f.write(raw if raw.endswith("\n") else raw + "\n")
    msg = json.loads(raw)
    mid, method = msg.get("id"), msg.get("method")
    if method is None:  # an answer to one of our requests
        answers[mid] = msg
        if waiting_ping is not None and "p1" in answers and "u1" in answers:
            text(waiting_ping, "ping: " + json.dumps(answers["p1"].get("result")) + "; unknown: " + str(answers["u1"]["error"]["code"]))
            waiting_ping = None
        continue
    if method == "initialize":
        v = os.environ.get("FAKE_VERSION", msg["params"]["protocolVersion"])
        result(mid, {"protocolVersion": v, "capabilities": {"tools": {"listChanged": True}}, "serverInfo": {"name": "fake", "version": "1"}})
    elif method == "tools/list":
        start = int((msg.get("params") or {}).get("cursor", "0"))
        res = {"tools": tools[start:start + page]}
        if start + page < len(tools):
            res["nextCursor"] = str(start + page)
        result(mid, res)
    elif method == "tools/call":
        name, args = msg["params"]["name"], msg["params"].get("arguments", {})
        if name == "echo":
            text(mid, args["message"])
        elif name == "add":
            text(mid, str(args["a"] + args["b"]))
        elif name == "fail":
            text(mid, "the disk is on fire", True)
        elif name == "hang":
            pass
        elif name == "garbage":
            out.write("this is \x1b[2J not JSON\x00\n")  # ESC and NUL: escaped where shown
            out.flush()
        elif name == "die":
            sys.exit(3)
        elif name == "flood":
            n = int(args.get("bytes", 1 << 20))
            chunk = "x" * 65536
            while n > 0:
                out.write(chunk[:min(n, 65536)])
                n -= 65536
            out.write("\n")
            out.flush()
        elif name == "image":
            data = base64.b64encode(b"\x89PNG\r\n\x1a\nfakepixels").decode()
            result(mid, {"content": [{"type": "text", "text": "a picture:"}, {"type": "image", "data": data, "mimeType": "image/png"}]})
        elif name == "structured":
            result(mid, {"content": [], "structuredContent": {"temperature": 21.5, "conditions": "sunny"}})
        elif name == "ping_me":
            waiting_ping = mid
            answers.clear()
            send({"jsonrpc": "2.0", "id": "p1", "method": "ping"})
            send({"jsonrpc": "2.0", "id": "u1", "method": "sampling/createMessage", "params": {}})
        elif name == "meta":
            text(mid, json.dumps(msg["params"].get("_meta")))
        elif name == "env":
            text(mid, json.dumps(dict(os.environ)))
        elif name == "add_tool":
            tools.append({"name": "extra", "inputSchema": S})
            send({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})
            text(mid, "added")
        else:
            send({"jsonrpc": "2.0", "id": mid, "error": {"code": -32602, "message": "Unknown tool: " + name}})
    elif method == "ping":
        result(mid, {})
    elif mid is not None:
        send({"jsonrpc": "2.0", "id": mid, "error": {"code": -32601, "message": "Method not found"}})
