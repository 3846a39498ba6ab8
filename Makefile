# respgate: a stateful OpenAI Responses gateway in front of vLLM.
# `make help` lists the targets. Optional local overrides go in a git-ignored .makerc.
-include .makerc

GO            ?= go
GO_TEST_ARGS  ?=
FUZZTIME      ?= 30s
# A short fuzz pass of every target runs inside `make test`.
TEST_FUZZTIME ?= 5s
PKGS          := ./...

.DEFAULT_GOAL := help
.PHONY: help run build test unit fuzz fuzz-short integration bench lint vet golden sim

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

test: vet ## the whole suite: vet, race-enabled unit and end-to-end tests on real Postgres and SQLite, short fuzz
	$(GO) test -race -count=1 -timeout 12m $(GO_TEST_ARGS) $(PKGS)
	$(MAKE) --no-print-directory fuzz-short

unit: ## tests without the race detector (faster local loop)
	$(GO) test -count=1 -timeout 10m $(GO_TEST_ARGS) $(PKGS)

integration: ## the end-to-end tests alone
	$(GO) test -race -count=1 -timeout 10m $(GO_TEST_ARGS) ./integration/...

FUZZ_TARGETS := ./upstream:FuzzDecode ./accumulator:FuzzAccumulate ./rehydrate:FuzzBuild

fuzz-short:
	@set -e; for t in $(FUZZ_TARGETS); do pkg=$${t%%:*}; fn=$${t##*:}; \
	  echo "fuzz $$fn ($(TEST_FUZZTIME))"; \
	  $(GO) test -run '^$$' -fuzz "^$$fn$$" -fuzztime $(TEST_FUZZTIME) $$pkg; done

fuzz: ## run every fuzz target for FUZZTIME each (default 30s)
	@$(MAKE) --no-print-directory fuzz-short TEST_FUZZTIME=$(FUZZTIME)

golden: ## rewrite golden files (review the diff!)
	$(GO) test ./upstream/vllmsim/... ./accumulator/... ./rehydrate/... -update

bench: ## microbenchmarks of the hot paths with allocation counts
	$(GO) test -run '^$$' -bench . -benchmem -count 1 $(GO_TEST_ARGS) ./accumulator/ ./rehydrate/ ./upstream/ ./store/...

lint: vet ## gofmt check and vet
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
