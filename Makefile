# sluice: the two commands a user needs are `make run` and `make test`.
#   make run      build the program, then start sluice on examples/sluice.yaml; ports:
#                 make run HTTP=127.0.0.1:18080 RESP=127.0.0.1:16380 GRPC=off ADMIN=...
#                 (also CONFIG=FILE, STORE=redis://HOST:PORT, WORKERS=N)
#   make test     build and run every test (ctest), then again under ASan+UBSan; both
#                 passes always run and are reported; the status fails if either failed
#   make test-fast  the edit-compile-test loop: unit tests, the instruction-count guard and
#                 the integration tests not labelled slow (ctest -LE 'slow|fuzz'), plain build
#   make test-plain / test-asan   one pass of make test each; TESTS=REGEX narrows any of them
#   make          build everything (library, program, man pages)
#   make install  PREFIX=/usr/local (DESTDIR= for staging); never overwrites an existing
#                 sysconfdir/sluice/sluice.yaml (GNUInstallDirs: /etc when PREFIX=/usr,
#                 else $(PREFIX)/etc)
#   make deb      Debian packages (dpkg-buildpackage -us -uc -b) into build-deb/
#   make bench    benchmarks against the peers, measured in the same run
#   make fuzz     coverage-guided fuzzing with clang's libFuzzer (FUZZ_SECONDS each)
# Each target installs only the Debian packages its purpose needs (scripts/deps.sh --for).
BUILD       ?= build
BUILD_ASAN  ?= build-asan
BUILD_FUZZ  ?= build-fuzz
BUILD_BENCH ?= build-bench
BUILD_DEB   ?= build-deb
PREFIX      ?= /usr/local
JOBS        ?= $(shell nproc 2>/dev/null || echo 2)
FUZZ_SECONDS ?= 60
# make run: empty means the config's own value
HTTP   ?=
RESP   ?=
GRPC   ?=
ADMIN  ?=
CONFIG ?= examples/sluice.yaml
STORE  ?=
WORKERS ?=

# CMake's generated makefiles call make recursively: without this every level prints
# "gmake[N]: Entering directory".
MAKEFLAGS += --no-print-directory

CONFIGURE = cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_INSTALL_PREFIX=$(PREFIX)

.PHONY: all deps build run test test-plain test-fast test-asan bench fuzz install deb clean

all: build

deps:
	@bash scripts/deps.sh --for build --for test

build:
	@bash scripts/deps.sh --for build
	@$(CONFIGURE) >/dev/null
	@cmake --build $(BUILD) -j$(JOBS)

# Quiet: the build's output goes to a log, shown only when the build fails.
run:
	@bash scripts/deps.sh --for run
	@mkdir -p $(BUILD)
	@echo "building sluice (log: $(BUILD)/build-run.log) ..."
	@{ $(CONFIGURE) && cmake --build $(BUILD) -j$(JOBS) --target sluice; } \
	  >$(BUILD)/build-run.log 2>&1 || { tail -40 $(BUILD)/build-run.log; exit 1; }
	@HTTP="$(HTTP)" RESP="$(RESP)" GRPC="$(GRPC)" ADMIN="$(ADMIN)" STORE="$(STORE)" \
	  WORKERS="$(WORKERS)" bash scripts/run.sh $(BUILD)/sluice $(CONFIG)

# ctest -j: tests pick free ports and run side by side, except those RUN_SERIAL in
# tests/test_classes.cmake; TESTS narrows a run (ctest -R).
CTEST_R = $(if $(TESTS),-R '$(TESTS)')

test-plain:
	@bash scripts/deps.sh --for test
	@$(CONFIGURE) >/dev/null
	@cmake --build $(BUILD) -j$(JOBS)
	ctest --test-dir $(BUILD) --output-on-failure -j$(JOBS) $(CTEST_R)

test-fast:
	@bash scripts/deps.sh --for test
	@$(CONFIGURE) >/dev/null
	@cmake --build $(BUILD) -j$(JOBS)
	ctest --test-dir $(BUILD) --output-on-failure -j$(JOBS) -LE 'slow|fuzz' $(CTEST_R)

test-asan:
	@bash scripts/deps.sh --for test
	@cmake -S . -B $(BUILD_ASAN) -DCMAKE_BUILD_TYPE=Debug -DSLUICE_SANITIZE=ON >/dev/null
	@cmake --build $(BUILD_ASAN) -j$(JOBS)
	ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
	  ctest --test-dir $(BUILD_ASAN) --output-on-failure -j$(JOBS) $(CTEST_R)

# Both passes run even when the first fails (a plain failure must not hide what the
# sanitizers would say); the summary names each, and the status is a failure if either is.
test:
	@plain=ok; asan=ok; \
	$(MAKE) test-plain || plain=FAILED; \
	$(MAKE) test-asan || asan=FAILED; \
	echo "make test: plain pass $$plain, ASan+UBSan pass $$asan"; \
	[ $$plain = ok ] && [ $$asan = ok ]

bench:
	@bash scripts/deps.sh --for bench
	@cmake -S . -B $(BUILD_BENCH) -DCMAKE_BUILD_TYPE=Release -DSLUICE_TESTS=OFF >/dev/null
	@cmake --build $(BUILD_BENCH) -j$(JOBS)
	@bash bench/run.sh $(BUILD_BENCH)

fuzz:
	@bash scripts/deps.sh --for fuzz
	@CC=clang cmake -S . -B $(BUILD_FUZZ) -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	  -DSLUICE_FUZZ=ON -DSLUICE_SANITIZE=ON >/dev/null
	@cmake --build $(BUILD_FUZZ) -j$(JOBS)
	@bash tests/fuzz/run.sh $(BUILD_FUZZ) $(FUZZ_SECONDS)

install: build
	cmake --install $(BUILD)

deb:
	@bash scripts/deps.sh --for build --for test
	@bash scripts/deb.sh $(BUILD_DEB)

clean:
	rm -rf $(BUILD) $(BUILD_ASAN) $(BUILD_FUZZ) $(BUILD_BENCH) $(BUILD_DEB)
