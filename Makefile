# Pillar: the LLM gateway ("proxy") and the pillar-csi storage driver.
# `make help` lists the targets. Tool and component versions: scripts/versions.env (also
# loaded by every script through scripts/lib.sh).

SHELL := /bin/bash
GO ?= go
BIN := $(CURDIR)/bin
VERSION ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -s -w -X github.com/pillarhq/pillar/impl/gateway/server.Version=$(VERSION)
# pillar-csi: each binary's Main reads the Version of its product package
# (-X of a package a binary does not link is ignored).
PILLAR_PKG := github.com/pillarhq/pillar/impl/pillar
PILLAR_LDFLAGS := -s -w -X $(PILLAR_PKG)/agent.Version=$(VERSION) -X $(PILLAR_PKG)/controller.Version=$(VERSION) -X $(PILLAR_PKG)/csinode.Version=$(VERSION)
export CGO_ENABLED ?= 0
# One compile configuration for vet, the tests and the binaries (make build
# and the image scripts use -trimpath): otherwise a cold build cache compiles
# every dependency twice, once per configuration.
export GOFLAGS ?= -trimpath
# Read, not included: an included file would override (and export over) a
# version given in the environment, which the scripts honour.
version = $(shell sed -n 's/^$(1)=//p' scripts/versions.env)
GOLANGCI_LINT_VERSION ?= $(call version,GOLANGCI_LINT_VERSION)

PLUGINS := modelrouter pinrouter hostile dialect
# Plugins written in WebAssembly text, assembled by wat2wasm (Debian's wabt).
WAT_PLUGINS := pinrouterwat

.PHONY: help build build-proxy build-sim proto plugins sanity e2e-kernel e2e-kind e2e-storage chart-docs config-docs test-charts images run demo test test-unit test-conformance bench vet lint generate verify setup clean

help: ## Show this help
	@grep -hE '^[a-zA-Z0-9_-]+:.*?## ' $(MAKEFILE_LIST) | awk 'BEGIN{FS=":.*?## "}{printf "  \033[36m%-18s\033[0m %s\n", $$1, $$2}'

build: ## Build every binary into bin/
	@mkdir -p $(BIN)
	$(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/proxy ./impl/cmd/proxy
	$(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/sim ./sim/cmd/sim
	$(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/fakestorage ./sim/cmd/fakestorage
	$(GO) build -trimpath -ldflags '$(PILLAR_LDFLAGS)' -o $(BIN)/pillar-agent ./impl/cmd/pillar-agent
	$(GO) build -trimpath -ldflags '$(PILLAR_LDFLAGS)' -o $(BIN)/pillar-controller ./impl/cmd/pillar-controller
	$(GO) build -trimpath -ldflags '$(PILLAR_LDFLAGS)' -o $(BIN)/pillar-node ./impl/cmd/pillar-node
	$(GO) build -trimpath -ldflags '$(PILLAR_LDFLAGS)' -o $(BIN)/pillar-agent-sim ./conformance/cmd/pillar-agent-sim
	$(GO) build -trimpath -ldflags '$(PILLAR_LDFLAGS)' -o $(BIN)/pillar-node-sim ./conformance/cmd/pillar-node-sim
	@$(MAKE) --no-print-directory plugins

# run and demo build only what they start (go build is incremental).
build-proxy: ## Build bin/proxy only
	@mkdir -p $(BIN)
	$(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/proxy ./impl/cmd/proxy

build-sim: ## Build bin/sim (the provider simulator) only
	@mkdir -p $(BIN)
	$(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/sim ./sim/cmd/sim

plugins: ## Build the sample WASM plugins (fixtures/plugins) into bin/plugins/
	@mkdir -p $(BIN)/plugins
	@for p in $(PLUGINS); do GOOS=wasip1 GOARCH=wasm $(GO) build -buildmode=c-shared -trimpath -o $(BIN)/plugins/$$p.wasm ./fixtures/plugins/$$p || exit 1; done
	@for p in $(WAT_PLUGINS); do wat2wasm -o $(BIN)/plugins/$$p.wasm fixtures/plugins/$$p/$$p.wat || exit 1; done

generate: proto chart-docs config-docs ## Regenerate every generated file (protobuf Go code, chart READMEs and schemas, the proxy's settings reference)

proto: ## Regenerate the Go code of impl/**/*.proto (protoc from Debian, pinned Go plugins)
	bash scripts/proto.sh

chart-docs: ## Regenerate the charts' README values tables and values.schema.json from values.yaml
	$(GO) run ./conformance/charts/cmd/chartdoc charts/pillar-csi charts/proxy

config-docs: ## Regenerate docs/configuration.md's settings tables from impl/gateway/server/configareas.go
	$(GO) test -count=1 ./impl/gateway/server -run TestConfigReference -args -update

test-charts: ## Chart suites (Helm's Go packages: lint, golden renders, strict decoding, refusals)
	$(GO) test -count=1 ./conformance/charts/

run: build-proxy ## Run the proxy on the embedded SQLite default (proxy :8080, admin [::1]:9090)
	$(BIN)/proxy $(ARGS)

demo: build-proxy build-sim ## Sim + proxy, seeded, real requests; KEEP=1 leaves both running for the dashboard
	KEEP=$(KEEP) $(GO) run ./conformance/demo

setup: ## Install what a fresh Debian machine lacks for the tests
	bash scripts/setup.sh

test: setup ## Run every test (unit, store on SQLite and PostgreSQL, conformance)
	bash scripts/test.sh

test-unit: ## Unit and package tests only (PostgreSQL half needs TEST_DATABASE_URL)
	$(GO) test -race -count=1 ./impl/... ./sim/...

images: ## Build the container images offline (Docker engine started if needed)
	bash scripts/images.sh

test-conformance: build ## Conformance suites against the real binaries
	$(GO) test -count=1 -timeout 20m ./conformance/... -args -bin-dir=$(BIN)

sanity: build ## csi-sanity (csi-test's sanity package) against pillar-agent-sim (simulated storage), pillar-controller (standalone) and pillar-node-sim (loop devices; root)
	$(GO) test -count=1 -v ./conformance/sanity/ -args -bin-dir=$(BIN) -ginkgo.no-color | grep -vE '^\s*(STEP|reusing|\[38)' | tail -40

e2e-kernel: ## The agent on a real kernel under qemu: LVM, ZFS, nvmet, nvme connect (guest image cached)
	bash scripts/e2e-kernel.sh

e2e-kind: ## Charts on an offline kind cluster: pillar-csi (PVC lifecycle, webhooks, mTLS, failover) and the proxy (rolling restart)
	bash scripts/e2e-kind.sh

e2e-storage: ## Every spec of Kubernetes' external storage suite against pillar-csi on a kind cluster (make test runs a subset)
	bash scripts/e2e-kind.sh --storage

bench: build ## Benchmarks: proxy overhead vs a bare reverse proxy; writes docs/benchmarks.md
	bash scripts/bench.sh

vet: ## go vet, gofmt check, shellcheck on scripts/
	$(GO) vet ./...
	@out=$$(gofmt -l impl sim conformance 2>/dev/null); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	@bash scripts/shellcheck.sh

# Not part of make test: building golangci-lint takes minutes on 2 cores.
lint: ## golangci-lint with .golangci.yml (installed into bin/tools at the pinned version)
	@mkdir -p $(BIN)/tools
	@[ -x $(BIN)/tools/golangci-lint ] && $(BIN)/tools/golangci-lint version 2>/dev/null | grep -q " $(GOLANGCI_LINT_VERSION:v%=%) " || GOBIN=$(BIN)/tools $(GO) install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)
	$(BIN)/tools/golangci-lint run ./...

verify: vet ## Fail when make generate or go mod tidy would change anything; pins and the impl/sim dependency boundary
	@bash scripts/verify.sh

clean: ## Remove build outputs
	rm -rf $(BIN)
