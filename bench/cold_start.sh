#!/bin/bash
# Cold start side by side (issue #34 item 6): two weir binaries, per 1B type, three rounds
# interleaved: `weir generate -n 1` (process start to the first token and exit) and `weir serve`
# (start to GET /health answering 200), each with its peak RSS, and the floor of a load: mmap
# the file with MAP_POPULATE and touch its pages (what llama.cpp's load of Q8_0 costs on x86).
# The models are bench_inference's (`bench_inference --shapes 1b --load-only` writes them).
# In each round, after weir's runs, llama.cpp itself on the same file (bench/llamacpp: node-llama-cpp
# 3.21.1's prebuilt libllama/ggml, installed by bench/llamacpp/setup; skipped, and said so, when it
# is not installed): a fresh node process to the model loaded (mmap), a context of
# LLAMACPP_CTX tokens (default 5952: the tokens weir's 256 MiB f32 KV pool holds for this shape)
# and the first greedy token of BOS + "hello", with node's start and import, and node-llama-cpp's
# backend (its test of the binary in a child process) timed apart; and the process's peak RSS.
# Usage: bench/cold_start.sh OLD_WEIR [NEW_WEIR [PORT]]   (one binary: NEW_WEIR omitted or the same)
set -u
OLD=$1 NEW=${2:-$1} PORT=${3:-18931}
D=${TMPDIR:-/tmp}/weir-bench-models-v2
LLAMACPP=$(cd "$(dirname "$0")/llamacpp" && pwd)
LLAMACPP_CTX=${LLAMACPP_CTX:-5952}
if [ -d "$LLAMACPP/node_modules/@node-llama-cpp/linux-x64/bins" ] && command -v node >/dev/null; then
  have_llamacpp=1
else
  have_llamacpp=0
  echo "llama.cpp: skipped (not installed: run bench/llamacpp/setup, which needs node and npm)"
fi
llamacpp() {  # MODEL -> "process_s peak_kb {json}"
  local t0 j
  t0=$(date +%s%N)
  j=$(T0_NS=$t0 /usr/bin/time -f "%e %M" -o /tmp/cold-start-llamacpp.t \
      node "$LLAMACPP/first_token.mjs" "$1" "$LLAMACPP_CTX" 2 2>/tmp/cold-start-llamacpp.err)
  [ -n "$j" ] || j="error: $(tail -c 300 /tmp/cold-start-llamacpp.err | tr '\n' ' ')"
  echo "$(cat /tmp/cold-start-llamacpp.t) $j"
}
floor() {
  python3 - "$1" <<'P'
import mmap, sys, time
t = time.perf_counter()
f = open(sys.argv[1], 'rb')
m = mmap.mmap(f.fileno(), 0, flags=mmap.MAP_PRIVATE | getattr(mmap, 'MAP_POPULATE', 0x8000),
              prot=mmap.PROT_READ)
s = sum(m[i] for i in range(0, len(m), 1 << 20))  # MAP_POPULATE mapped every page
print("%.3f" % (time.perf_counter() - t))
P
}
serve_ready() {  # BINARY MODEL -> "seconds peak_kb"
  local t0 t1 tp
  t0=$(date +%s.%N)
  /usr/bin/time -f "%M" -o /tmp/cold-start-serve.rss "$1" serve --model "$2" --port "$PORT" \
    >/dev/null 2>&1 &
  tp=$!
  until curl -sf "localhost:$PORT/health" >/dev/null 2>&1; do sleep 0.01; done
  t1=$(date +%s.%N)
  sleep 0.5
  kill -INT "$(pgrep -P $tp)"
  wait $tp
  echo "$(echo "$t1 - $t0" | bc) $(cat /tmp/cold-start-serve.rss)"
}
rounds() {
  echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
  for T in Q8_0 Q4_K Q4_0; do
    M=$D/weir-1b-$T.gguf
    for round in 1 2 3; do
      for B in $( [ "$OLD" = "$NEW" ] && echo "$NEW" || echo "$OLD $NEW"); do
        n=$([ "$OLD" = "$NEW" ] && echo weir || { [ "$B" = "$NEW" ] && echo new || echo old; })
        WEIR_LOG=debug /usr/bin/time -f "%e %M" -o /tmp/cold-start-gen.t "$B" generate --model "$M" \
          --prompt hello -n 1 >/dev/null 2>/tmp/cold-start-gen.err
        # how the weights were placed: "mapped" (the copy in 2 MiB page-cache pages) or "read"
        # (into anonymous memory: the copy's page cache is not in 2 MiB folios, or no copy)
        how=$(grep -o 'mapped in 2 MiB\|read into anonymous\|rearrang' /tmp/cold-start-gen.err | head -1 | cut -d' ' -f1)
        echo "$T $n generate_s,peak_kb $(cat /tmp/cold-start-gen.t) serve_ready_s,peak_kb $(serve_ready "$B" "$M") weights ${how:-?}"
      done
      echo "$T floor_s $(floor "$M")"
      [ $have_llamacpp = 1 ] && echo "$T llamacpp process_s,peak_kb $(llamacpp "$M")"
    done
  done
  echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
}
LOG=$(mktemp /tmp/cold-start.XXXXXX)
rounds | tee "$LOG"
# A copy whose page cache holds small folios (read with read/pread, e.g. by `cp` or an older weir)
# is read into anonymous memory on every start until it leaves the page cache; on a VM that hands
# freed memory back to its host (free page reporting) that memory is refaulted from the host, at
# ~2.5 s of system time for 1.3 GB here. `weights` says which path each run took.
# Medians per type. llama.cpp's own part: from its backend ready (after node's start, the import
# of node-llama-cpp and its test of the binary in a child process, none of which llama-cli pays)
# to the model loaded, the context created (what llama-server needs before /health, less its
# warm-up run) and the first token; ratio = weir's whole process (generate) or start to /health
# 200 (serve) over that part.
python3 - "$LOG" <<'P'
import json, statistics as st, sys
rows = {}
for line in open(sys.argv[1]):
    f = line.split()
    if len(f) < 3 or f[0] not in ("Q8_0", "Q4_K", "Q4_0"): continue
    r = rows.setdefault(f[0], {"gen": [], "gen_kb": [], "serve": [], "serve_kb": [], "ll": [], "ll_proc": [], "ll_kb": []})
    if f[1] in ("weir", "new") and f[2] == "generate_s,peak_kb":
        r["gen"].append(float(f[3])); r["gen_kb"].append(int(f[4]))
        r["serve"].append(float(f[6])); r["serve_kb"].append(int(f[7]))
    elif f[1] == "llamacpp" and len(f) > 5 and f[5].startswith("{"):
        r["ll"].append(json.loads(" ".join(f[5:]))); r["ll_proc"].append(float(f[3])); r["ll_kb"].append(int(f[4]))
print("medians (min) of the rounds, seconds; peak RSS MB (median)")
print("type | weir generate (MB) | weir serve /health (MB) | llama.cpp: node start+import | +backend"
      " | load | context | first token | own to ready | own to first token | process (peak MB, RSS at token)"
      " | weir/llama.cpp: generate | serve")
for t, r in rows.items():
    w = lambda v: "%.3f (%.3f)" % (st.median(v), min(v))
    if not r["ll"]:
        print(t, "| %s (%d) | %s (%d) | llama.cpp: none" % (w(r["gen"]), st.median(r["gen_kb"]) / 1000,
                                                         w(r["serve"]), st.median(r["serve_kb"]) / 1000)); continue
    m = lambda k: st.median([j[k] for j in r["ll"]])
    d = lambda a, b: [j[a] - j[b] for j in r["ll"]]
    ready, first = d("context_s", "backend_s"), d("first_token_s", "backend_s")
    print("%s | %s (%d) | %s (%d) | %.3f | %.3f | %.3f | %.3f | %.3f | %s | %s | %.2f (%d, %d) | %.2f (%.2f) | %.2f (%.2f)" % (
        t, w(r["gen"]), st.median(r["gen_kb"]) / 1000, w(r["serve"]), st.median(r["serve_kb"]) / 1000,
        m("import_s"), st.median(d("backend_s", "import_s")), st.median(d("model_s", "backend_s")),
        st.median(d("context_s", "model_s")), st.median(d("first_token_s", "context_s")), w(ready), w(first),
        st.median(r["ll_proc"]), st.median(r["ll_kb"]) / 1000, m("rss_kb") / 1000,
        st.median(r["gen"]) / st.median(first), min(r["gen"]) / min(first),
        st.median(r["serve"]) / st.median(ready), min(r["serve"]) / min(ready)))
P
rm -f "$LOG"
