# weir: the commands a newcomer needs are `make demo` and `make test` (see README.md).
#
#   make            build (Release) into build/, executables in build/bin/
#   make demo       set up, build the `weir` binary only, and run the main job
#   make test       set up, build everything (in the same build/), run the whole suite with ctest
#   make install    build and install into PREFIX (default /usr/local; DESTDIR honoured)
#   make package    the Debian package, build-package/weir_<version>_amd64.deb (CPU build)
#   make check-install  stage an install, build samples/consumer against it and run it
#   make check-package  install the .deb (root), run it, build the consumer, remove it
#   make test-asan  the whole test suite under AddressSanitizer + UBSan (build-asan/)
#   make bench      build and run the benchmarks, each printing JSON
#   make fuzz       build the libFuzzer targets with clang (build-fuzz/) and run each briefly
#   make gauntlet   the OOM gauntlet, quick (< 3 min; CI runs it); gauntlet-full: the full run
#   make chaos      the scale-out chaos bench, quick (~2-3 min): workers killed with SIGKILL every
#                   2 s, weir's sessions ended, PostgreSQL restarted (-m fast, -m immediate) and a
#                   worker paused while its run is cancelled, as 600 runs go through a throwaway
#                   PostgreSQL (bench/scaleout/run), and LangGraph.js with its PostgreSQL
#                   checkpointer beside weir's throughput (the peer, bench/scaleout/setup)
#   make format     clang-format every C++ file in place

BUILD      ?= build
ASAN_BUILD ?= build-asan
FUZZ_BUILD ?= build-fuzz
PKG_BUILD  ?= build-package
PREFIX     ?= /usr/local
CTEST_JOBS ?= $(shell nproc)
FUZZ_RUNS  ?= 20000
# fuzz_http_session plays whole sessions over loopback (tens of ms each, not µs): fewer runs
FUZZ_SESSION_RUNS ?= 500
GENERATOR  := $(shell command -v ninja >/dev/null 2>&1 && echo Ninja || echo "Unix Makefiles")
LAUNCHER   := $(shell command -v ccache >/dev/null 2>&1 && echo -DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)

.PHONY: all build setup configure demo test test-asan bench fuzz gauntlet gauntlet-full chaos format clean \
        install package check-install check-package

all: build

setup:
	@scripts/setup

$(BUILD)/CMakeCache.txt:
	cmake -S . -B $(BUILD) -G "$(GENERATOR)" -DCMAKE_BUILD_TYPE=Release $(LAUNCHER)

configure: setup $(BUILD)/CMakeCache.txt

build: configure
	cmake --build $(BUILD)

# The demo needs the `weir` binary alone (scripts/demo runs nothing else): no tests, no benches.
demo: configure
	cmake --build $(BUILD) --target weir
	@scripts/demo $(BUILD)

test: build
	@tests/mcp/setup
	@tests/serve/clients/setup
	@tests/langgraph/clients/setup
	@tests/console/browser/setup
	ctest --test-dir $(BUILD) --output-on-failure -j$(CTEST_JOBS)

install: build
	cmake --install $(BUILD) --prefix $(PREFIX)

# The package is the CPU build (a CUDA build's libraries would need the CUDA toolkit to link),
# without tests or benches; with ccache its objects are mostly those of build/.
$(PKG_BUILD)/CMakeCache.txt:
	cmake -S . -B $(PKG_BUILD) -G "$(GENERATOR)" -DCMAKE_BUILD_TYPE=Release -DWEIR_CUDA=OFF \
	  -DWEIR_BUILD_TESTS=OFF -DWEIR_BUILD_BENCH=OFF $(LAUNCHER)

package: setup $(PKG_BUILD)/CMakeCache.txt
	cmake --build $(PKG_BUILD)
	cd $(PKG_BUILD) && cpack -G DEB
	@ls $(PKG_BUILD)/weir_*.deb

check-install: build
	scripts/check-install $(BUILD)

check-package: package
	scripts/check-package

$(ASAN_BUILD)/CMakeCache.txt:
	cmake -S . -B $(ASAN_BUILD) -G "$(GENERATOR)" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	  "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1" -DWEIR_SANITIZE=ON -DWEIR_BUILD_BENCH=OFF \
	  -DWEIR_CUDA=OFF $(LAUNCHER)

test-asan: setup $(ASAN_BUILD)/CMakeCache.txt
	cmake --build $(ASAN_BUILD)
	@tests/mcp/setup
	@tests/serve/clients/setup
	@tests/langgraph/clients/setup
	@tests/console/browser/setup
	ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	  ctest --test-dir $(ASAN_BUILD) --output-on-failure -j$(CTEST_JOBS)

bench: build
	@for b in $(BUILD)/bin/bench_*; do [ -x "$$b" ] || continue; echo "== $$b --json"; "$$b" --json || exit 1; done

$(FUZZ_BUILD)/CMakeCache.txt:
	CC=clang CXX=clang++ cmake -S . -B $(FUZZ_BUILD) -G "$(GENERATOR)" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	  -DWEIR_FUZZ=ON -DWEIR_BUILD_TESTS=OFF -DWEIR_BUILD_BENCH=OFF -DWEIR_CUDA=OFF $(LAUNCHER)

fuzz: setup $(FUZZ_BUILD)/CMakeCache.txt
	cmake --build $(FUZZ_BUILD)
	@mkdir -p $(FUZZ_BUILD)/seeds/fuzz_gguf && $(FUZZ_BUILD)/bin/seed_gguf $(FUZZ_BUILD)/seeds/fuzz_gguf/vocab.gguf
	@set -e; for f in $(FUZZ_BUILD)/bin/fuzz_*; do [ -x "$$f" ] || continue; n=$$(basename $$f); \
	  runs=$(FUZZ_RUNS); [ $$n != fuzz_http_session ] || runs=$(FUZZ_SESSION_RUNS); \
	  echo "== $$n: $$runs runs"; work=$$(mktemp -d); seeds=; \
	  for d in fuzz/corpus/$$n $(FUZZ_BUILD)/seeds/$$n; do if [ -d $$d ]; then seeds="$$seeds $$d"; fi; done; \
	  "$$f" -runs=$$runs -max_len=65536 -seed=1 -print_final_stats=0 $$work $$seeds >$$work.log 2>&1 \
	    || { tail -n 40 $$work.log; exit 1; }; tail -n 1 $$work.log; rm -rf $$work $$work.log; done

gauntlet: build
	@bench/gauntlet/setup || echo "gauntlet: the LangGraph.js peer could not be installed; weir's side runs alone"
	bench/gauntlet/run --quick --bin $(BUILD)/bin/weir_gauntlet

gauntlet-full: build
	@bench/gauntlet/setup || echo "gauntlet: the LangGraph.js peer could not be installed; weir's side runs alone"
	bench/gauntlet/run --bin $(BUILD)/bin/weir_gauntlet

chaos: build
	@bench/scaleout/setup || echo "chaos: the LangGraph.js peer could not be installed; its phase is skipped"
	bench/scaleout/run --quick --weir $(BUILD)/bin/weir

format:
	@git ls-files '*.cpp' '*.hpp' '*.h' '*.cu' '*.cuh' | xargs clang-format -i

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) $(FUZZ_BUILD) $(PKG_BUILD)
