// Workflow texts more than one CLI-level test file runs.
#pragma once

namespace weir::testing {

// A counter that loops back through a router until it reaches 10.
inline constexpr const char* kLoopGuard =
    R"({"name": "loop_guard", "state": {"n": {"reducer": "sum", "default": 0}},
 "nodes": {"tick": {"kind": "set", "values": {"n": 1}}, "check": {"kind": "router"}},
 "edges": [{"from": "START", "to": "tick"}, {"from": "tick", "to": "check"},
           {"from": "check", "route": {"when": {"channel": "n", "op": ">=", "value": 10}, "then": "END", "else": "tick"}}]})";

// fetch: a 100 KB tool output (moved to the artifact store); review: a pause; peek: reads the
// end of the document back through the `artifacts` tool.
inline constexpr const char* kBigDoc = R"({"name": "big_doc",
 "state": {"doc": {}, "verdict": {}, "tail": {}},
 "tools": {"gen": {"builtin": "lorem"}, "read": {"builtin": "artifacts"}},
 "nodes": {"fetch": {"kind": "tool", "tool": "gen", "args": {"bytes": 100000}, "output": "doc"},
           "review": {"kind": "interrupt", "payload": {"size": "{{state.doc.bytes}}"}, "output": "verdict"},
           "peek": {"kind": "tool", "tool": "read", "args": {"id": "{{state.doc.$artifact}}", "offset": 99990, "length": 10}, "output": "tail"}},
 "edges": [{"from": "START", "to": "fetch"}, {"from": "fetch", "to": "review"},
           {"from": "review", "to": "peek"}, {"from": "peek", "to": "END"}]})";

// Six rounds of (nap 150 ms, tick) over channels under three reducers; the input sets all three,
// so a continued run that applied it again would show it twice (total 10000, "start" twice).
inline constexpr const char* kTally = R"({"name": "tally",
 "state": {"total": {"reducer": "sum", "default": 0}, "left": {"reducer": "sum", "default": 0},
           "log": {"reducer": "append"}, "slept": {}},
 "input": ["total", "left", "log"], "output": ["total", "left", "log"],
 "tools": {"wait": {"builtin": "sleep"}},
 "limits": {"recursion_limit": 1000},
 "nodes": {"nap": {"kind": "tool", "tool": "wait", "args": {"ms": 150}, "output": "slept"},
           "tick": {"kind": "set", "values": {"left": -1, "log": "tick"}}},
 "edges": [{"from": "START", "to": "nap"}, {"from": "nap", "to": "tick"},
           {"from": "tick", "route": {"when": {"channel": "left", "op": "<=", "value": 0},
                                      "then": "END", "else": "nap"}}]})";
inline constexpr const char* kTallyInput = R"('{"total": 5000, "left": 6, "log": ["start"]}')";
inline constexpr const char* kTallyOutput =
    R"({"total":5000,"left":0,"log":["start","tick","tick","tick","tick","tick","tick"]})"
    "\n";

}  // namespace weir::testing
