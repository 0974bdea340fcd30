# lesfarm — run `make help` for the targets.
SHELL := /bin/bash
GO ?= go
BIN := bin/lesfarm
PKGS := ./...
TEST_TIMEOUT ?= 14m

.DEFAULT_GOAL := help

help: ## Show this help
	@awk 'BEGIN {FS = ":.*##"; printf "Targets:\n"} /^[a-zA-Z0-9_\/-]+:.*##/ { printf "  %-14s %s\n", $$1, $$2 }' $(MAKEFILE_LIST)

setup: ## Install system dependencies (PostgreSQL; qemu-user for arm64 tests) on Debian when root; otherwise print what to install
	@bash scripts/setup.sh

build: ## Build bin/lesfarm
	$(GO) build -o $(BIN) ./cmd/lesfarm

demo: build ## Run the whole farm on embedded defaults and watch it catch a real LES regression (docs/demo.md; DEMO_FLAGS=--exit stops after)
	./$(BIN) demo $(DEMO_FLAGS)

test: ## Run the test suite (needs PostgreSQL binaries; see `make setup`)
	$(GO) vet $(PKGS)
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { echo "gofmt needed:"; gofmt -l $$(git ls-files '*.go'); exit 1; }
	@set -o pipefail; $(GO) test -count=1 -timeout $(TEST_TIMEOUT) -json $(PKGS) | $(GO) run ./internal/testsum

test/race: ## Run the tests with the race detector
	$(GO) test -count=1 -race -timeout 30m $(PKGS)

test/kernels: ## Test the tensor kernels in every build: default (assembly), pure Go (-tags purego) and GOEXPERIMENT=simd
	$(GO) test -count=1 ./runtime/tensor
	$(GO) test -count=1 -tags purego ./runtime/tensor ./runtime/model
	GOEXPERIMENT=simd $(GO) test -count=1 ./runtime/tensor

test/arm64: ## Cross-build for phones and run the runtime tests for arm64 under qemu (see .ci/mobile.sh)
	bash .ci/mobile.sh

bench: ## Run the Go benchmarks (kernels, runtime, ingest); long, not part of `test`
	$(GO) test -run '^$$' -bench . -benchtime 2x -timeout 60m $(PKGS)

bench/peer: ## llama.cpp (node-llama-cpp, pinned) against lesfarm on one GGUF, round by round (MODEL=path, ROUNDS=3, BASE=older lesfarm binary as a third engine, CAPPED_ROWS=0 resident rows only; root for the capped rows); not part of `test`
	bash scripts/bench-peer/peer.sh $(MODEL)

bench/ppl: ## perplexity by llama.cpp's llama-perplexity (built once from the pinned node-llama-cpp's source) and by lesfarm on the same files (MODELS='reference.gguf other.gguf ...', TEXT, CTX=128, CHUNKS=4); not part of `test`
	bash scripts/bench-peer/ppl.sh $(MODELS)

fuzz: ## Fuzz every parser for 30s each
	@for p in $$(grep -rl --include='*_test.go' '^func Fuzz' . | xargs -n1 dirname | sort -u); do \
	  for f in $$(grep -ho '^func Fuzz[A-Za-z0-9_]*' $$p/*_test.go | cut -d' ' -f2); do \
	    echo "== $$p $$f"; $(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime 30s $$p || exit 1; \
	  done; \
	done

GOLANGCI_LINT_VERSION := v2.15.0
DEADCODE_VERSION := v0.52.0
GOBIN := $(shell $(GO) env GOPATH)/bin

lint: ## gofmt, go vet, go mod tidy -diff, golangci-lint (.golangci.yml), deadcode, the 600-line file check and no fused multiply-adds in the arm64 build of any Go package (scripts/nofma.sh); installs pinned linters from the module proxy when missing
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); exit 1; }
	bash scripts/filesize.sh
	bash scripts/nofma.sh
	$(GO) vet $(PKGS)
	$(GO) mod tidy -diff
	@$(GOBIN)/golangci-lint version 2>/dev/null | grep -q "$(GOLANGCI_LINT_VERSION:v%=%)" || $(GO) install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)
	$(GOBIN)/golangci-lint run $(PKGS)
	@test -x $(GOBIN)/deadcode || $(GO) install golang.org/x/tools/cmd/deadcode@$(DEADCODE_VERSION)
	@out="$$($(GOBIN)/deadcode -test $(PKGS))"; if [ -n "$$out" ]; then echo "deadcode: unreachable even from tests:"; echo "$$out"; exit 1; fi

.PHONY: help setup build demo test test/race test/kernels test/arm64 bench bench/peer bench/ppl fuzz lint
