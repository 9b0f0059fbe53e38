#!/bin/bash
# Cold start side by side (issue #34 item 6): two weir binaries, per 1B type, three rounds
# interleaved: `weir generate -n 1` (process start to the first token and exit) and `weir serve`
# (start to GET /health answering 200), each with its peak RSS, and the floor of a load: mmap
# the file with MAP_POPULATE and touch its pages (what llama.cpp's load of Q8_0 costs on x86).
# The models are bench_inference's (`bench_inference --shapes 1b --load-only` writes them).
# Usage: bench/cold_start.sh OLD_WEIR NEW_WEIR [PORT]
set -u
OLD=$1 NEW=$2 PORT=${3:-18931}
D=${TMPDIR:-/tmp}/weir-bench-models-v2
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
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
for T in Q8_0 Q4_K Q4_0; do
  M=$D/weir-1b-$T.gguf
  for round in 1 2 3; do
    for B in "$OLD" "$NEW"; do
      n=$([ "$B" = "$NEW" ] && echo new || echo old)
      /usr/bin/time -f "%e %M" -o /tmp/cold-start-gen.t "$B" generate --model "$M" \
        --prompt hello -n 1 >/dev/null 2>&1
      echo "$T $n generate_s,peak_kb $(cat /tmp/cold-start-gen.t) serve_ready_s,peak_kb $(serve_ready "$B" "$M")"
    done
    echo "$T floor_s $(floor "$M")"
  done
done
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
