// weir: command-line front door. `weir help` lists the commands.
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

#include "build_info.hpp"
#include "commands.hpp"
#include "weir/runtime/log.hpp"
#include "weir/version.hpp"

namespace weir::cli {
namespace {

constexpr Command kCommands[] = {
    {"demo", "run the research crew 64 times at once on one engine and one memory budget",
     "usage: weir demo [--crews N] [--concurrency N] [--crew FILE] [--model PATH]\n"
     "                 [--max-model-len N]\n\n"
     "Runs N instances (default 64, 32 admitted at once) of samples/crews/research_crew.json:\n"
     "researcher -> writer -> reviewer, with document search over samples/data and artifacts.\n"
     "Ends with a summary table: runs, steps, tool calls, tokens, tokens/s, peak memory by\n"
     "budget category, KV blocks, prefix-cache hits, preemptions. The model is --model or\n"
     "WEIR_MODEL, else a small random-weight model weir generates (its text is noise; the\n"
     "mechanics are real).\n\n"
     "example:\n  WEIR_MODEL=model.gguf weir demo --crews 32\n",
     cmd_demo},
    {"run", "run a workflow file and print its final state as JSON",
     "usage: weir run FILE [--input JSON | --input @file.json] [--model PATH]\n"
     "                [--thread ID [--store DB|postgres://...]] [--stream] [--max-model-len N]\n"
     "                [--instances N] [--concurrency N] [--table]\n"
     "                [--trace FILE] [--otlp-endpoint URL] [--trace-content]\n\n"
     "Runs a workflow, crew or group-chat file under its limits and prints the result as JSON\n"
     "on stdout; a summary goes to stderr. --model overrides every model's path (crews and\n"
     "group chats: --model, else WEIR_MODEL, else weir's random-weight model); --model\n"
     "openai:http://HOST:PORT/v1/MODEL sends every model call to an OpenAI-compatible\n"
     "endpoint instead (the key from OPENAI_API_KEY when set). Crew and group-\n"
     "chat files can run many instances at once (--instances, --concurrency), which prints a\n"
     "summary table instead. --thread keeps a checkpoint per superstep in the store (see\n"
     "weir resume) so an interrupted run continues with weir resume and a crashed one with\n"
     "the same command (the input is not applied again); a terminal shows live progress;\n"
     "--stream prints the run's events as JSON lines before the result. --trace FILE writes\n"
     "the run's OpenTelemetry spans as OTLP JSON lines (read them with weir trace FILE);\n"
     "--otlp-endpoint URL (or OTEL_EXPORTER_OTLP_ENDPOINT) sends them to an OTLP/HTTP\n"
     "collector; --trace-content adds prompts, completions and tool arguments\n"
     "(docs/tracing.md). Exit codes: 0 success (or paused at an interrupt), 1 invalid input,\n"
     "2 run failed (typed error on stderr), 3 overloaded, 4 the store failed (cannot be\n"
     "reached or refused a statement).\n\n"
     "examples:\n  weir run samples/workflows/map_reduce.json\n"
     "  weir run samples/crews/research_crew.json --input '{\"topic\": \"paged attention\"}'\n"
     "  weir run samples/crews/research_crew.json --model openai:http://127.0.0.1:8080/v1/tiny\n",
     cmd_run},
    {"batch", "run a workflow once per line of a JSONL file of inputs",
     "usage: weir batch FILE --inputs INPUTS.jsonl [--max-concurrency N] [--output OUT.jsonl]\n"
     "                  [--model PATH] [--trace FILE] [--otlp-endpoint URL] [--trace-content]\n\n"
     "Runs the workflow once per line of INPUTS.jsonl (each line a JSON object of channel\n"
     "values), N at once (default 16), and writes one JSON line per run, in input order:\n"
     "{\"index\": i, \"ok\": true, \"state\": {...}} or {\"index\": i, \"ok\": false, \"error\":\n"
     "{\"code\": ..., \"message\": ...}} (blank lines are skipped). Lines are read as runs\n"
     "finish, so memory stays bounded whatever the file's length; a bad line is reported and\n"
     "the rest run; a terminal shows progress. Exit code 0 when every run succeeded, 2\n"
     "otherwise. The tracing flags are those of 'weir run': each line's run is a trace.\n\n"
     "example:\n  weir batch samples/workflows/map_reduce.json --inputs inputs.jsonl "
     "--max-concurrency 64\n",
     cmd_batch},
    {"resume", "continue a workflow thread paused at an interrupt node",
     "usage: weir resume THREAD_ID [--value JSON] [--store DB] [--file FILE] [--stream]\n"
     "                   [--trace FILE] [--otlp-endpoint URL] [--trace-content]\n\n"
     "Continues the thread from its last checkpoint: the interrupt node that paused it receives\n"
     "--value (JSON; null when absent) in its output channel, and the run goes on to END or\n"
     "the next interrupt. The workflow file is the one the thread's checkpoints recorded\n"
     "(--file overrides). The store is --store, else $WEIR_STORE, else\n"
     "$XDG_DATA_HOME/weir/checkpoints.db (~/.local/share/weir/checkpoints.db). Works in a new\n"
     "process: the state comes from the store.\n\n"
     "example:\n  weir run samples/workflows/human_review.json --thread t1\n"
     "  weir resume t1 --value '\"approve\"'\n",
     cmd_resume},
    {"store", "prune a checkpoint store: keep the last N checkpoints per thread, or a TTL",
     "usage: weir store prune [--store DB] (--keep N | --older-than DURATION) [--thread ID]\n\n"
     "Removes old checkpoints from every thread of the store (or one --thread): --keep N keeps\n"
     "the newest N of each thread, --older-than drops those put longer ago than DURATION (30d,\n"
     "12h, 15m, 45s, 500ms; a thread that is all older goes as a whole); both may be given.\n"
     "Checkpoints a kept one needs to rebuild its state (back to the nearest snapshot) stay.\n"
     "The store is --store (a file, or a postgres:// or postgresql:// URI), else $WEIR_STORE,\n"
     "else $XDG_DATA_HOME/weir/checkpoints.db. Prints how many checkpoints went.\n\n"
     "examples:\n  weir store prune --keep 100\n"
     "  weir store prune --store postgres://weir@db:5432/weir --older-than 30d\n",
     cmd_store},
    {"submit", "queue a workflow run in PostgreSQL for weir worker; prints the run id",
     "usage: weir submit FILE --db URL [--input JSON | --input @file.json] [--thread ID]\n"
     "                   [--max-attempts N] [--max-queued-runs N] [--trace FILE]\n"
     "                   [--otlp-endpoint URL]\n\n"
     "Validates the workflow file and its input, then queues one run of it in the database's\n"
     "run queue (table weir_runs) and prints the run's id on stdout. The run carries the\n"
     "file's text and SHA-256, so any worker can run it (paths inside the file, such as\n"
     "subgraphs and tool folders, resolve against the file's absolute path on the worker).\n"
     "Its checkpoints go to thread --thread (default: the run id) in the same database. A run\n"
     "whose worker dies is taken over by another once its lease lapses and continues from its\n"
     "last checkpoint; after --max-attempts claims (default 3) it fails with\n"
     "attempts_exhausted. When --max-queued-runs runs (default 100000) wait in the queue\n"
     "already, the submit is refused (exit 3) and nothing is queued. --db is a postgres:// or\n"
     "postgresql:// URI (or libpq key=value pairs), else $WEIR_DB; passwords may come from\n"
     "PGPASSWORD or ~/.pgpass. See\n"
     "docs/scale-out.md. The run record keeps a W3C traceparent (this submit's span when\n"
     "traced, else a fresh trace): every worker attempt's spans continue that one trace.\n\n"
     "example:\n  weir submit samples/workflows/map_reduce.json --db postgres://weir@db/weir\n",
     cmd_submit},
    {"worker", "run queued workflow runs from PostgreSQL, up to N at once",
     "usage: weir worker --db URL [--max-runs N] [--once | --exit-when-idle] [--lease DURATION]\n"
     "                   [--memory SIZE] [--name NAME] [--poll DURATION]\n"
     "                   [--connect-timeout DURATION] [--trace FILE] [--otlp-endpoint URL]\n"
     "                   [--trace-content]\n\n"
     "Claims queued runs (FOR UPDATE SKIP LOCKED; any number of workers on any number of\n"
     "machines may share one database) and runs up to --max-runs at once (default 4) under one\n"
     "memory budget (--memory, default 1GiB; no run is claimed while 90% of it is in use).\n"
     "It wakes on LISTEN/NOTIFY when a run is queued or cancelled, and otherwise looks for work\n"
     "every --poll (default 2s). Each run is held through a lease of --lease (default 10s)\n"
     "renewed every third of it on the database's clock; a run whose worker stopped renewing\n"
     "is taken over when its lease lapses. Every superstep's checkpoint is committed only\n"
     "while the worker still holds the run, so no step is committed twice. --once runs one run\n"
     "and exits; --exit-when-idle exits when no run is left in the queue, queued or running\n"
     "(it waits for a run whose worker died until its lease lapses, and runs it). SIGTERM or\n"
     "SIGINT stops claiming, stops the runs held before their next superstep and hands them\n"
     "back to the queue. A database that cannot be reached at start is tried again with\n"
     "backoff for --connect-timeout (default 30s; 0 tries once), then exit code 4. Progress\n"
     "goes to stderr.\n\n"
     "example:\n  weir worker --db postgres://weir@db/weir --max-runs 16\n",
     cmd_worker},
    {"runs", "list the runs of a PostgreSQL run queue and their state",
     "usage: weir runs --db URL [RUN_ID] [--state STATE] [--limit N] [--after RUN_ID] [--json]\n\n"
     "Lists the newest runs (default 50): id, state (queued, running, succeeded, failed,\n"
     "cancelled, interrupted), attempts, workflow, thread, age, and the error or the worker\n"
     "holding it; when older runs follow, stderr says how to list them (--after the last id\n"
     "shown). --json prints the page as GET /v1/runs of weir serve answers it ({\"data\":\n"
     "[runs], \"has_more\", \"last_id\"}). With a RUN_ID, prints that run as one JSON object\n"
     "(the runs API's shape), its result (the workflow's output channels) or error included.\n\n"
     "examples:\n  weir runs --db postgres://weir@db/weir --state failed\n"
     "  weir runs --db postgres://weir@db/weir --after r-0123456789abcdef\n"
     "  weir runs --db postgres://weir@db/weir r-0123456789abcdef\n",
     cmd_runs},
    {"cancel", "cancel a queued or running run of a PostgreSQL run queue",
     "usage: weir cancel RUN_ID --db URL\n\n"
     "A queued run is cancelled at once. A running one is marked and its worker is notified:\n"
     "the run stops before its next superstep (a sleeping node within 50 ms; a node in the\n"
     "middle of a call finishes it first), and its state becomes cancelled. What it committed\n"
     "stays on its thread. A finished run is left as it is. It says which of these it did; a\n"
     "queued run that had run before (its worker stopped) is named as such, with the\n"
     "checkpoints it had committed.\n\n"
     "example:\n  weir cancel r-0123456789abcdef --db postgres://weir@db/weir\n",
     cmd_cancel},
    {"trace", "print the spans of a trace file as a tree with durations",
     "usage: weir trace FILE [--attributes] [--trace-id ID]\n\n"
     "Reads OTLP JSON lines (what 'weir run --trace FILE' writes, one batch of spans a line;\n"
     "an OTLP/HTTP receiver's request bodies have the same shape) and prints each trace as a\n"
     "tree: every span under its parent in start order, with its duration; a failed span ends\n"
     "with '! <error type>: <message>'. --attributes lists each span's attributes and events\n"
     "under it; --trace-id keeps one trace. See docs/tracing.md.\n\n"
     "example:\n  weir run samples/crews/research_crew.json --trace run.jsonl && weir trace "
     "run.jsonl\n",
     cmd_trace},
    {"validate", "check workflow files and report every problem",
     "usage: weir validate FILE...\n\n"
     "Parses and validates each workflow file (docs/workflow-format.md) and reports every\n"
     "problem as file:line:column: pointer: message, with suggestions for typos.\n"
     "Exit code 0 when all files are valid, 1 otherwise.\n\n"
     "example:\n  weir validate samples/workflows/*.json\n",
     cmd_validate},
    {"graph", "print a workflow as a Graphviz DOT graph",
     "usage: weir graph FILE [--format dot]\n\n"
     "Prints the workflow's graph: nodes shaped by kind, conditional edges dashed and\n"
     "labelled with their case, map workers dotted, subgraphs as clusters.\n\n"
     "example:\n  weir graph samples/workflows/map_reduce.json | dot -Tsvg > map_reduce.svg\n",
     cmd_graph},
    {"tokenize", "print the token ids of a text for a GGUF model or vocabulary",
     "usage: weir tokenize --model FILE (--text TEXT | --text-file FILE) [--no-bos]\n"
     "                     [--parse-special]\n\n"
     "Prints the ids, space-separated, on one line. Works on any GGUF file with a tokenizer,\n"
     "vocab-only files and architectures weir cannot run included. The text is read as weir\n"
     "generate reads a prompt: as text (\"</s>\" is four characters, not end-of-sequence).\n"
     "--parse-special makes special-token texts written in it (e.g. <|im_start|>) their ids.\n\n"
     "example:\n  weir tokenize --model model.gguf --text \"I dream of\"\n",
     cmd_tokenize},
    {"generate", "generate text from a prompt with a GGUF model",
     "usage: weir generate --model FILE --prompt TEXT [-n N] [--temp T] [--seed S] [--top-k K]\n"
     "                     [--top-p P] [--min-p P] [--threads N] [--device auto|cpu|cuda] "
     "[--json]\n"
     "                     [--kv-cache-type f32|f16|q8_0] [--parse-special]\n"
     "                     [--json-schema FILE | --grammar FILE.gbnf | --regex RE | --choice "
     "a,b]\n\n"
     "Streams the generated text (greedy unless --temp > 0). --json prints one object with the\n"
     "tokens, text, finish reason and timings instead. Structured output: --json-schema makes\n"
     "the output a JSON value valid for the schema, --grammar follows a GBNF grammar, --regex\n"
     "matches the whole output, --choice is one of the comma-separated strings; generation\n"
     "ends when the value is complete (docs/structured-output.md). --kv-cache-type f16 keeps\n"
     "K and V as halves: twice the tokens in the same memory; q8_0 as 8-bit values with a scale\n"
     "per head: up to 3.9 times the tokens (heads of 64; CPU). The prompt is text: a\n"
     "special token's text in it (\"</s>\", \"<|im_start|>\") stays text unless\n"
     "--parse-special makes such texts their token ids.\n\n"
     "example:\n  weir generate --model model.gguf --prompt \"Once upon a time\" -n 64\n"
     "  weir generate --model model.gguf --prompt \"A user:\" --json-schema user.schema.json\n",
     cmd_generate},
    {"mcp", "serve weir's tools and workflows over MCP (stdio)",
     "usage: weir mcp [--tools calculator,files,artifacts] [--root DIR] [--workflows DIR]\n"
     "                [--max-message-bytes N] [--trace FILE] [--otlp-endpoint URL]\n"
     "                [--trace-content]\n\n"
     "Serves Model Context Protocol over stdin/stdout (JSON-RPC 2.0, one message per line):\n"
     "initialize, ping, tools/list, tools/call and notifications/cancelled. The tools are the\n"
     "built-ins named by --tools (default: calculator; also files, artifacts, doc_search,\n"
     "lorem, sleep; files and doc_search work in --root, default .)\n"
     "and every workflow file in --workflows, as a tool whose arguments are the workflow's\n"
     "input channels; a call runs the workflow under its limits and answers its output as\n"
     "JSON text. Every call runs under weir's tool fences (timeout, concurrency, output cap:\n"
     "larger outputs are stored as artifacts). Logs go to stderr. With --trace or\n"
     "--otlp-endpoint, each tools/call is a span under the client's params._meta.traceparent,\n"
     "with a workflow's run under it (docs/tracing.md).\n\n"
     "example (an MCP client's server entry):\n"
     "  {\"command\": \"weir\", \"args\": [\"mcp\", \"--workflows\", \"samples/workflows\"]}\n",
     cmd_mcp},
    {"serve", "serve models over HTTP with the OpenAI API (chat, completions, metrics)",
     "usage: weir serve --model [NAME=]FILE [--model ...] [--host H] [--port P]\n"
     "                  [--api-key-env VAR] [--insecure] [--max-num-seqs N] [--max-model-len N]\n"
     "                  [--kv-cache-mb MB] [--kv-cache-type f32|f16|q8_0] [--chat-template NAME]\n"
     "                  [--ignore-eos]\n"
     "                  [--max-queued-requests N] [--max-queued-tokens N] [--max-connections N]\n"
     "                  [--max-body-bytes N] [--request-memory-mb MB] [--default-max-tokens N]\n"
     "                  [--max-n N] [--allowed-origins LIST] [--allowed-hosts LIST]\n"
     "                  [--request-timeout S] [--grace S] [--write-timeout S] [--idle-timeout "
     "S]\n"
     "                  [--mcp-tools calculator,files,artifacts] [--mcp-workflows DIR]\n"
     "                  [--mcp-root DIR] [--workflows DIR [--db URL] [--max-runs N]\n"
     "                  [--max-queued-runs N] [--keep-runs N] [--max-threads N]\n"
     "                  [--webhook-hosts LIST]]\n"
     "                  [--trace FILE] [--otlp-endpoint URL] [--trace-content] [--console]\n\n"
     "Serves POST /v1/chat/completions, POST /v1/completions, GET /v1/models, GET /health,\n"
     "GET /metrics, POST /tokenize and POST /detokenize on 127.0.0.1:8080 by default. A\n"
     "request's \"model\" picks a model by name (the file's stem unless NAME=FILE). Beyond\n"
     "--max-num-seqs running and --max-queued-requests queued, requests get 429 at once.\n"
     "--api-key-env names an environment variable holding the key every request must send as\n"
     "'Authorization: Bearer KEY' (GET /health needs none); a non-loopback --host needs it (or\n"
     "--insecure). Without a key, no web page of another site may drive the server: a Host that\n"
     "is not this machine, an Origin of another site and a body that is not\n"
     "'Content-Type: application/json' are refused, and CORS is answered only for the pages of\n"
     "--allowed-origins. SIGTERM or SIGINT drains: /health says shutting_down and new work is\n"
     "503, requests in flight finish within --grace (default 30 s), the rest end with what they\n"
     "have, exit 0; a second signal exits at once. --mcp-tools and\n"
     "--mcp-workflows also serve those tools (as 'weir mcp' does) over MCP's Streamable HTTP\n"
     "transport at POST /mcp; with them, --model is optional. --workflows DIR adds the runs\n"
     "API (POST /v1/runs, GET /v1/runs/{id} and its /events stream, POST /v1/runs/{id}/cancel,\n"
     "POST /v1/threads/{id}/resume, GET /v1/threads/{id}/state) for the workflow files in DIR:\n"
     "run here, --max-runs at once (default 8), with --max-queued-runs waiting (default 256;\n"
     "beyond, 429); in memory, or with --db postgres://... queued in PostgreSQL, where 'weir\n"
     "worker' processes share them and nothing is lost across a crash. The same runs are\n"
     "served in the LangGraph Server API's shapes (/assistants, /threads, /runs) for the\n"
     "LangGraph SDK, keeping at most --max-threads threads (default 100000); a run's\n"
     "'webhook' may call only the hosts of --webhook-hosts (host, host:port; none by\n"
     "default: the server makes the request). --console\n"
     "serves the web console at /console: runs, their graphs, interrupts to answer and the\n"
     "fences' charts (docs/console.md). See docs/serve.md and docs/langgraph-api.md.\n\n"
     "example:\n  weir serve --model model.gguf\n"
     "  curl -s localhost:8080/v1/chat/completions -H 'Content-Type: application/json' \\\n"
     "    -d '{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]}'\n",
     cmd_serve},
    {"inspect", "show a GGUF file's metadata, tensors, tokenizer and model shape",
     "usage: weir inspect FILE\n\nexample:\n  weir inspect model.gguf\n", cmd_inspect},
};

void print_help() {
  std::printf(
      "weir %s: a multi-agent orchestration runtime that cannot run out of memory\n\n"
      "usage: weir COMMAND [ARGS...]\n       weir COMMAND --help\n\ncommands:\n",
      WEIR_VERSION_STRING);
  for (const auto& c : kCommands) {
    std::printf("  %-10.*s %.*s\n", static_cast<int>(c.name.size()), c.name.data(),
                static_cast<int>(c.summary.size()), c.summary.data());
  }
  std::printf(
      "\nexit codes: 0 success, 1 invalid input, 2 run failed (typed error on stderr),\n"
      "            3 overloaded, 4 the store or queue failed (cannot be reached, refused)\n"
      "environment: WEIR_LOG=trace|debug|info|warn|error|off\n");
}

// The usage of a command by name, or nullptr.
const Command* find_command(std::string_view name) {
  for (const auto& c : kCommands)
    if (c.name == name) return &c;
  return nullptr;
}

}  // namespace
}  // namespace weir::cli

namespace {

// Models (and their rearranged copies) are memory-mapped: a file truncated or rewritten in place
// while mapped kills the process with SIGBUS when a removed page is read. Say so on the way out.
void on_sigbus(int) {
  static const char msg[] =
      "weir: SIGBUS: a memory-mapped file was truncated or rewritten in place while in use (a "
      "model file, or its .weir-x16 copy?); replace such files by renaming a new one over them "
      "(docs/serve.md, Start-up)\n";
  [[maybe_unused]] auto n = ::write(2, msg, sizeof msg - 1);
  ::signal(SIGBUS, SIG_DFL);
  ::raise(SIGBUS);
}

void install_sigbus_note() {
  struct sigaction sa = {};
  sa.sa_handler = on_sigbus;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGBUS, &sa, nullptr);
}

}  // namespace

int main(int argc, char** argv) {
  using namespace weir::cli;
  install_sigbus_note();
  weir::init_logging();
  std::vector<std::string_view> args(argv + 1, argv + argc);
  if (args.empty() || args[0] == "help" || args[0] == "--help" || args[0] == "-h") {
    if (args.size() >= 2) {
      const Command* c = find_command(args[1]);
      if (!c) {
        std::fprintf(stderr, "weir help: unknown command '%.*s' (see 'weir help')\n",
                     static_cast<int>(args[1].size()), args[1].data());
        return kExitInvalidInput;
      }
      std::fwrite(c->usage.data(), 1, c->usage.size(), stdout);
      return kExitOk;
    }
    print_help();
    return args.empty() ? kExitInvalidInput : kExitOk;
  }
  if (args[0] == "--version" || args[0] == "version") {
    std::printf("weir %s (%s)\n", WEIR_VERSION_STRING, WEIR_GIT_DESCRIBE);
    return kExitOk;
  }
  // Hidden: the build writes the bash completion and the man page with these (docs_gen.cpp).
  if (args[0] == "--print-completion" && args.size() == 2 && args[1] == "bash") {
    print_bash_completion(kCommands);
    return kExitOk;
  }
  if (args[0] == "--print-man") {
    print_man(kCommands);
    return kExitOk;
  }
  if (const Command* c = find_command(args[0])) {
    for (auto a : args) {
      if (a == "--help" || a == "-h") {
        std::fwrite(c->usage.data(), 1, c->usage.size(), stdout);
        return kExitOk;
      }
    }
    return c->run(Args(args).subspan(1));
  }
  std::fprintf(stderr, "weir: unknown command '%.*s' (see 'weir help')\n",
               static_cast<int>(args[0].size()), args[0].data());
  return kExitInvalidInput;
}
