# sandbox-runtime. `make test` is exactly what CI (.ci/run) calls.
#
#   make build                      bin/sandbox-runtime, version from git describe
#   make run ARGS='--max-running 4' go run the daemon on 127.0.0.1:8888, base dir a fresh temp dir
#   make test                       go test -race ./...  (unit + end-to-end), each binary under internal/testexec
#   make bench BENCH_ARGS=...       Go benchmarks (BENCH_PKGS, BENCH_ARGS: see below)
#   make lint                       gofmt check + go vet
#   make reliability                the reliability suite (build tag "reliability")
#   make clean

GO      ?= go
BIN     ?= bin/sandbox-runtime
VERSION ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X main.version=$(VERSION)
# The daemon's build tags (internal/daemontest.BuildTags; internal/deps checks
# every build line): grpcnotrace leaves out x/net/trace and html/template.
BUILD_TAGS := grpcnotrace

# `make run`: the daemon on loopback (RUN_ADDR) with a fresh temporary base dir
# (RUN_BASE_DIR to choose one), never the source tree: it runs whatever it is
# sent, and without a token anyone who reaches the address may send it.
# ARGS: extra daemon arguments (e.g. ARGS='--token-file FILE').
RUN_ADDR     ?= 127.0.0.1:8888
RUN_BASE_DIR ?=
ARGS ?=
# Extra `go test` flags for `make test` (e.g. TEST_FLAGS='-v -count=1').
# The timeout bounds a hung package well inside CI's budget.
TEST_FLAGS ?= -timeout 8m
# Benchmarks: packages and extra flags (e.g. BENCH_ARGS='-benchtime=3x -count=5').
# The load tool (cmd/sandbox-bench) hooks in here as a further step of `bench`.
BENCH_PKGS ?= ./ringbuf/ ./runtime/ ./api/
BENCH_ARGS ?=
# Extra flags for the load tool (cmd/sandbox-bench), e.g. BENCH_TOOL_ARGS=-quick.
BENCH_TOOL_ARGS ?=
# Reliability suite (build tag "reliability"; see reliability/doc.go): full run
# ~2-3 min on 2 cores; CI runs it with RELIABILITY_ARGS='-short -timeout 8m'.
RELIABILITY_ARGS ?= -timeout 20m

.PHONY: all build run test bench lint reliability reliability-race clean

all: lint test build

build:
	CGO_ENABLED=0 $(GO) build -trimpath -tags '$(BUILD_TAGS)' -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/sandbox-runtime

run:
	@base='$(RUN_BASE_DIR)'; \
	if [ -z "$$base" ]; then base=$$(mktemp -d "$${TMPDIR:-/tmp}/sandbox-runtime-run.XXXXXX") || exit 1; fi; \
	echo "make run: listening on $(RUN_ADDR), base dir $$base"; \
	exec $(GO) run -tags '$(BUILD_TAGS)' -ldflags '$(LDFLAGS)' ./cmd/sandbox-runtime --addr '$(RUN_ADDR)' --base-dir "$$base" $(ARGS)

# Every test binary runs under internal/testexec (go test -exec): in a PID
# namespace of its own where Linux allows it, so that no process a test
# starts outlives it, even when the binary is SIGKILLed (a timeout); a
# process still alive when the binary exits fails its package. go test
# caches no result of a binary run through -exec: TEST_EXEC= runs the
# binaries directly (cached, unguarded).
TESTEXEC := $(CURDIR)/bin/testexec
TEST_EXEC ?= -exec '$(TESTEXEC)'

test:
	$(GO) build -o $(TESTEXEC) ./internal/testexec
	$(GO) test -race $(TEST_EXEC) $(TEST_FLAGS) ./...

bench:
	$(GO) test -run '^$$' -bench . -benchmem -benchtime 1s -timeout 5m $(BENCH_ARGS) $(BENCH_PKGS)
	$(GO) run ./cmd/sandbox-bench -deadline 170s $(BENCH_TOOL_ARGS)

lint:
	@out="$$(gofmt -l .)"; if [ -n "$$out" ]; then echo "gofmt -l: these files need gofmt:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...

reliability:
	rm -f reliability-figures.txt
	RELIABILITY_FIGURES=$(CURDIR)/reliability-figures.txt $(GO) test -tags reliability -count=1 -v $(RELIABILITY_ARGS) ./reliability/

reliability-race:
	RELIABILITY_RACE=1 $(GO) test -tags reliability -count=1 -v $(RELIABILITY_ARGS) ./reliability/

clean:
	rm -rf bin/ dist/
