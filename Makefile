# sluice: the two commands a user needs are `make run` and `make test`.
#   make run     build, then start sluice on the embedded default (examples/)
#   make test    build and run every test (ctest), then again under ASan+UBSan
#   make bench   benchmarks against the peers, measured in the same run
#   make fuzz    coverage-guided fuzzing with clang's libFuzzer (FUZZ_SECONDS each)
#   make install PREFIX=/usr/local
BUILD       ?= build
BUILD_ASAN  ?= build-asan
BUILD_FUZZ  ?= build-fuzz
BUILD_BENCH ?= build-bench
PREFIX      ?= /usr/local
JOBS        ?= $(shell nproc 2>/dev/null || echo 2)
FUZZ_SECONDS ?= 60

.PHONY: all deps build run test test-fast test-asan bench fuzz install clean

all: build

deps:
	@bash scripts/deps.sh

build: deps
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_INSTALL_PREFIX=$(PREFIX) >/dev/null
	@cmake --build $(BUILD) -j$(JOBS)

run: build
	@bash scripts/run.sh $(BUILD)/sluice

test-fast: build
	ctest --test-dir $(BUILD) --output-on-failure -j$(JOBS)

test-asan: deps
	@cmake -S . -B $(BUILD_ASAN) -DCMAKE_BUILD_TYPE=Debug -DSLUICE_SANITIZE=ON >/dev/null
	@cmake --build $(BUILD_ASAN) -j$(JOBS)
	ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
	  ctest --test-dir $(BUILD_ASAN) --output-on-failure -j$(JOBS)

test: test-fast test-asan

bench: deps
	@bash scripts/deps.sh --bench
	@cmake -S . -B $(BUILD_BENCH) -DCMAKE_BUILD_TYPE=Release -DSLUICE_TESTS=OFF >/dev/null
	@cmake --build $(BUILD_BENCH) -j$(JOBS)
	@bash bench/run.sh $(BUILD_BENCH)

fuzz: deps
	@CC=clang cmake -S . -B $(BUILD_FUZZ) -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	  -DSLUICE_FUZZ=ON -DSLUICE_SANITIZE=ON >/dev/null
	@cmake --build $(BUILD_FUZZ) -j$(JOBS)
	@bash tests/fuzz/run.sh $(BUILD_FUZZ) $(FUZZ_SECONDS)

install: build
	cmake --install $(BUILD)

clean:
	rm -rf $(BUILD) $(BUILD_ASAN) $(BUILD_FUZZ) $(BUILD_BENCH)
