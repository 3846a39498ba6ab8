# respgate: a stateful OpenAI Responses gateway in front of vLLM.
# `make help` lists the targets. Optional local overrides go in a git-ignored .makerc.
-include .makerc

GO            ?= go
GO_TEST_ARGS  ?=
FUZZTIME      ?= 30s
# A short fuzz pass of every target runs inside `make test`. It is budgeted in executions, not
# time: a duration is a context deadline in go test's fuzz coordinator, and on a loaded machine a
# worker still busy when it fires fails the target with "context deadline exceeded" and no crasher.
TEST_FUZZTIME ?= 10000x
# Minimising each new interesting input may take up to a minute by default, during which no
# execution is counted (a short pass looked stalled at 0 execs/s); 100 executions are plenty.
FUZZ_MINIMIZE ?= 100x
PKGS          := ./...

.DEFAULT_GOAL := help
.PHONY: help run build test unit fuzz fuzz-short integration bench bench-micro bench-compare lint vet vulncheck golden sim mutate

help: ## list the targets
	@awk 'BEGIN{FS=":.*## "} /^[a-zA-Z_\/-]+:.*## /{printf "  %-14s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

build: ## build bin/respgate and bin/vllm-sim
	$(GO) build -o bin/respgate ./cmd/respgate
	$(GO) build -o bin/vllm-sim ./cmd/vllm-sim

run: build ## start respgate on :8080 with the embedded SQLite store in ./data (simulated model unless RESPGATE_UPSTREAM_URL is set)
	./bin/respgate

sim: build ## start the vLLM simulator alone on :8000
	./bin/vllm-sim --listen :8000

vet: ## go vet over everything
	$(GO) vet $(PKGS)

# The test step runs with -vet=off: lint has just run go vet over every package with all of its
# analyzers, a superset of the few go test runs by default, so running them again only costs time.
test: lint ## the whole suite: lint, race-enabled unit and end-to-end tests on real Postgres and SQLite, short fuzz, the Helm chart, dashboard and alert rules
	$(GO) test -race -vet=off -count=1 -timeout 12m $(GO_TEST_ARGS) $(PKGS)
	$(MAKE) --no-print-directory fuzz-short
	$(MAKE) --no-print-directory deploy-test

unit: ## tests without the race detector (faster local loop)
	$(GO) test -count=1 -timeout 10m $(GO_TEST_ARGS) $(PKGS)

integration: ## the end-to-end tests alone
	$(GO) test -race -count=1 -timeout 10m $(GO_TEST_ARGS) ./integration/...

FUZZ_TARGETS := ./upstream:FuzzDecode ./accumulator:FuzzAccumulate ./rehydrate:FuzzBuild ./internal/jsonscan:FuzzScan ./server:FuzzWritersEmitValidJSON ./chatbridge:FuzzTranslate

fuzz-short:
	@set -e; for t in $(FUZZ_TARGETS); do pkg=$${t%%:*}; fn=$${t##*:}; \
	  echo "fuzz $$fn ($(TEST_FUZZTIME))"; \
	  $(GO) test -run '^$$' -fuzz "^$$fn$$" -fuzztime $(TEST_FUZZTIME) -fuzzminimizetime $(FUZZ_MINIMIZE) $$pkg; done

fuzz: ## run every fuzz target for FUZZTIME each (default 30s)
	@$(MAKE) --no-print-directory fuzz-short TEST_FUZZTIME=$(FUZZTIME)

golden: ## rewrite golden files (review the diff!)
	$(GO) test ./upstream/vllmsim/... ./accumulator/... ./rehydrate/... -update

# Benchmarks. `bench` is the side-by-side report (respgate vs the simulator reached directly and
# through a bare reverse proxy; bench/out/report.md and bench/out/report.json, git-ignored; under
# 10 minutes; docs/benchmarks.md keeps a dated summary);
# BENCH_ARGS passes flags to cmd/benchrun (e.g. -quick, -only chain,agent, -rounds 5).
# `bench-micro` runs the testing.B benchmarks of the hot paths; `bench-compare` runs them for
# BENCH_BASE and the working tree, interleaved, and compares them with benchstat.
BENCH_ARGS  ?=
BENCH_PKGS  ?= ./accumulator/ ./rehydrate/ ./upstream/ ./store/... ./server/
BENCH       ?= .
BENCH_BASE  ?= HEAD
BENCH_COUNT ?= 6

bench: build ## the benchmark report: added TTFB/gaps, CPU, allocations, RSS per stream, chains, capacity (bench/out/report.md)
	$(GO) build -o bin/loadgen ./cmd/loadgen
	$(GO) build -o bin/benchrun ./cmd/benchrun
	./bin/benchrun -bin bin -out bench/out $(BENCH_ARGS)

bench-micro: ## microbenchmarks of the hot paths with allocation counts (accumulator, rehydrate, upstream, store)
	$(GO) test -run '^$$' -bench '$(BENCH)' -benchmem -count 1 $(GO_TEST_ARGS) $(BENCH_PKGS)

bench-compare: ## microbenchmarks of BENCH_BASE (default HEAD) vs the working tree, with benchstat
	GO='$(GO)' BENCH_BASE='$(BENCH_BASE)' BENCH_COUNT='$(BENCH_COUNT)' BENCH='$(BENCH)' BENCH_PKGS='$(BENCH_PKGS)' sh bench/compare.sh

# The linters are pinned in go.mod (tool directives) and configured in .golangci.yml. The first run
# builds them and fills the analysis cache (about 12 minutes on 2 cores); later runs take seconds
# to a minute, depending on what changed.
lint: vet ## gofmt check, vet, golangci-lint (.golangci.yml, import rules of docs/design.md §2) and staticcheck
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	@echo "lint: golangci-lint and staticcheck (pinned in go.mod; the first run builds them and fills their cache: about 12 minutes on 2 cores, silent meanwhile)"
	$(GO) tool golangci-lint run $(PKGS)
	$(GO) tool staticcheck $(PKGS)

# govulncheck needs the vulnerability database at vuln.go.dev, which neither this machine nor CI
# can reach (only the Go module proxy and the Debian and npm registries are), so it is its own
# target and not part of `make test`. Run it where vuln.go.dev answers.
vulncheck: ## known vulnerabilities in the code's call graph (govulncheck; needs vuln.go.dev, not part of make test)
	$(GO) tool govulncheck $(PKGS)

# Mutation testing (docs/testing.md, "Mutation testing"): gremlins, pinned in go.mod, changes one
# token at a time (a condition, a boundary, an operator) in each package of MUTATE_PKGS and runs
# that package's tests against it; a change no test notices (LIVED) is a rule nothing checks. Each
# mutant rebuilds the package's tests, so it is slow (tens of minutes per package on two busy
# cores) and not part of `make test`. Logs and JSON results go to bin/mutate/. A mutant's tests
# may take MUTATE_TIMEOUT times as long as the package's coverage run (whose build is cached,
# while each mutant's is not: hence the large factor) before it counts as timed out.
# GOFLAGS=-count=1 keeps that coverage run from being a cached result, which would make the
# timeout a fraction of a real run; -vet=off because go vet is not a test (a mutant vet dislikes
# would count as killed) and vetting every mutant only slows it. Do not pass --test-cpu in
# MUTATE_ARGS: gremlins v0.6.0 hands "-cpu N" to go test as one argument, which fails every run
# and counts every mutant as killed.
# The mutate build tag adds store/mutate_test.go, which runs the shared conformance suite from
# package store itself (a mutant is tested with its own package's tests only); store/storetest,
# the suite, is not mutated.
MUTATE_PKGS    ?= accumulator rehydrate store server
MUTATE_WORKERS ?= 1
MUTATE_TIMEOUT ?= 50
MUTATE_ARGS    ?=

mutate: ## mutation testing (gremlins) of accumulator, rehydrate, store and server: score and survivors per package (slow; not in make test)
	@mkdir -p bin/mutate
	@set -e; for p in $(MUTATE_PKGS); do \
	  echo "== mutating ./$$p (progress: tail -f bin/mutate/$$p.log)"; mkdir -p bin/mutate/$$(dirname $$p); \
	  GOFLAGS="$$GOFLAGS -count=1 -vet=off" $(GO) tool gremlins unleash --workers $(MUTATE_WORKERS) --timeout-coefficient $(MUTATE_TIMEOUT) \
	    --tags mutate -E '^storetest/' -o bin/mutate/$$p.json $(MUTATE_ARGS) ./$$p > bin/mutate/$$p.log 2>&1 || { cat bin/mutate/$$p.log; exit 1; }; \
	  grep -E '^ *(LIVED|TIMED OUT) ' bin/mutate/$$p.log | sed 's/^ */  /' || true; \
	  grep -E '^(Killed|Timed out|Test efficacy):' bin/mutate/$$p.log | sed 's/^/  /'; \
	done

# The operator's files that need heavy dependencies (Helm's Go library, the Kubernetes API types,
# the Prometheus PromQL parser): deploy/opstest is its own module, so they stay out of go.mod and
# out of the race-enabled build of ./... (`make test` runs this target after it). It renders and
# lints the Helm chart and checks the dashboard's and alert rules' PromQL against a live respgate
# (the binary, with a fleet of two simulated vLLM replicas), and evaluates every alert rule over
# synthetic series that must make it fire and series under which it must stay silent (seconds;
# the same evaluation as `promtool test rules`). The first run downloads and builds
# them (a few minutes on 2 cores). No -race: it checks files, and respgate's own code is
# race-tested by the step before.
.PHONY: deploy-test
deploy-test: ## the Helm chart (rendered, strictly decoded, linted) and the dashboard and alert rules (PromQL against a live respgate with a fleet); part of make test
	@echo "deploy-test: building deploy/opstest (Helm, Kubernetes API types, Prometheus parser; minutes on a first run, silent meanwhile)"
	cd deploy/opstest && $(GO) test -count=1 -timeout 10m $(GO_TEST_ARGS) ./...

# The container path with a real Docker engine (deploy/compose-test; docs/deployment.md says what it
# proves): local stand-ins for the registry images, the Dockerfile and docker-compose.yml unchanged,
# a smoke through the published port, down -v. As root it installs what it needs (docker.io,
# debootstrap, jq) and builds Docker Compose v2 from its Go module. Not part of `make test`.
.PHONY: compose-test
compose-test: ## the Dockerfile and docker-compose.yml on a real engine, with a smoke (root; ~15 min from a clean machine, not part of make test)
	bash deploy/compose-test

# Real clients (integration/clients/README.md): npm packages pinned in package.json +
# package-lock.json, installed with `npm ci` into integration/clients/node_modules (git-ignored)
# when the lock file changes. CODEX=0 leaves out Codex CLI (a ~400 MB package); CI runs that.
CODEX ?= 1
CLIENTS := integration/clients
COMPAT_TAGS := compat$(if $(filter 1,$(CODEX)), codex)
NPM_CI := npm ci --no-audit --no-fund --loglevel=warn

$(CLIENTS)/node_modules/.installed: $(CLIENTS)/package.json $(CLIENTS)/package-lock.json
	cd $(CLIENTS) && $(NPM_CI)
	@touch $@

$(CLIENTS)/codex/node_modules/.installed: $(CLIENTS)/codex/package.json $(CLIENTS)/codex/package-lock.json
	cd $(CLIENTS)/codex && $(NPM_CI)
	@touch $@

compat: $(CLIENTS)/node_modules/.installed $(if $(filter 1,$(CODEX)),$(CLIENTS)/codex/node_modules/.installed) ## real clients (openai-node 6/7, Agents SDK, AI SDK, openai-go, Codex CLI unless CODEX=0) against respgate + the simulator, checked against Open Responses
	COMPAT_REPORT=$(CURDIR)/bin/compat-table.md $(GO) test -count=1 -timeout 10m -tags '$(COMPAT_TAGS)' -v ./$(CLIENTS)/

# The Open Responses compliance suite (integration/orsuite) is not vendored: it is read at run time
# from ORSUITE_DIR (required; set it here or in .makerc), the folder holding its run.sh, which
# installs bun and zod into ORSUITE_CACHE (git-ignored under bin/) on first use.
ORSUITE_DIR   ?=
ORSUITE_CACHE ?= $(CURDIR)/bin/orsuite-cache

.PHONY: orsuite
orsuite: ## the Open Responses compliance suite against respgate + the simulator, default and --reasoning-exposure hidden (needs npm; ORSUITE_DIR=folder of the suite's run.sh); scores in bin/orsuite.md
	ORSUITE_DIR=$(if $(ORSUITE_DIR),$(abspath $(ORSUITE_DIR))) ORSUITE_CACHE=$(ORSUITE_CACHE) ORSUITE_REPORT=$(CURDIR)/bin/orsuite.md \
		$(GO) test -count=1 -timeout 15m -tags orsuite -v ./integration/orsuite/

# Chaos and soak (integration/chaos, docs/testing.md "Chaos and soak"). `make test` runs the fast
# subset of the matrix (one seed per scenario); `chaos` runs CHAOS_SEEDS seeds of every scenario on
# both backends and prints the scenario table (also in bin/chaos-table.md). A violation prints its
# replay command: make chaos CHAOS_RUN='scenario/backend/seed-NN'.
CHAOS_SEEDS    ?= 10
CHAOS_PARALLEL ?= 16
CHAOS_RUN      ?=
SOAK_DURATION  ?= 10m
SOAK_TIMEOUT   ?= 40m
# fuzz-long runs every fuzz target (or FUZZ_LONG_TARGETS) for FUZZ_LONG_TIME each, one at a time,
# and prints the executions per target (bin/fuzz-long/summary.txt); FUZZ_LONG_ARGS passes flags
# (e.g. -parallel 1 on a loaded machine).
FUZZ_LONG_TIME    ?= 10m
FUZZ_LONG_TARGETS ?= $(FUZZ_TARGETS)
FUZZ_LONG_ARGS    ?=

.PHONY: chaos soak fuzz-long
chaos: ## the full fault matrix: every scenario x both backends x CHAOS_SEEDS seeds, audited; prints the table (under 15 min; not part of make test)
	@mkdir -p bin
	@rm -f bin/chaos-table.md
	@CHAOS_SEEDS=$(CHAOS_SEEDS) CHAOS_TABLE=$(CURDIR)/bin/chaos-table.md $(GO) test -count=1 -timeout 30m -parallel $(CHAOS_PARALLEL) \
	  -run 'TestChaos$(if $(CHAOS_RUN),/$(CHAOS_RUN))' $(GO_TEST_ARGS) ./integration/chaos/; st=$$?; \
	  cat bin/chaos-table.md 2>/dev/null; exit $$st

soak: ## waves of 500 concurrent streams with random cancels, cuts and slow readers for SOAK_DURATION (10m); resources and error rate checked per wave, audited
	@mkdir -p bin
	@echo "soak for $(SOAK_DURATION) (log: bin/soak.log)"
	@SOAK_DURATION=$(SOAK_DURATION) $(GO) test -tags soak -count=1 -timeout $(SOAK_TIMEOUT) -v -run '^TestSoak$$' $(GO_TEST_ARGS) ./integration/chaos/ > bin/soak.log 2>&1; st=$$?; \
	  grep -E '^(soak |--- |ok|FAIL|PASS)|VIOLATION|soak_test.go' bin/soak.log; exit $$st

fuzz-long: ## every fuzz target for FUZZ_LONG_TIME (10m) each, one at a time, printing executions per target
	@mkdir -p bin/fuzz-long
	@: > bin/fuzz-long/summary.txt
	@set -e; for t in $(FUZZ_LONG_TARGETS); do pkg=$${t%%:*}; fn=$${t##*:}; \
	  echo "fuzz $$fn ($(FUZZ_LONG_TIME))"; \
	  $(GO) test -run '^$$' -fuzz "^$$fn$$" -fuzztime $(FUZZ_LONG_TIME) -fuzzminimizetime $(FUZZ_MINIMIZE) $(FUZZ_LONG_ARGS) $$pkg > bin/fuzz-long/$$fn.log 2>&1 || { tail -40 bin/fuzz-long/$$fn.log; exit 1; }; \
	  execs=$$(grep -o 'execs: [0-9]*' bin/fuzz-long/$$fn.log | tail -1 | cut -d' ' -f2); \
	  echo "  $$fn: $${execs:-?} executions"; echo "$$pkg $$fn $${execs:-?}" >> bin/fuzz-long/summary.txt; \
	done; echo "executions per target:"; cat bin/fuzz-long/summary.txt
