# roomlog — see README.md.
GO      ?= go
export PATH := /usr/local/go/bin:$(PATH)

.PHONY: test zookeeper prometheus fmt-check vet unit build

## build: roomlog and dfsmaster-demo into $(BINDIR), with the commit stamped
## (-ldflags -X) so --version names it even with GOFLAGS=-buildvcs=false.
BINDIR  ?= bin
COMMIT  := $(shell git rev-parse HEAD 2>/dev/null)
DIRTY   := $(shell git status --porcelain --untracked-files=no 2>/dev/null | head -n 1)
LDFLAGS := $(if $(COMMIT),-X github.com/roomlog/roomlog/version.stampCommit=$(COMMIT)) $(if $(DIRTY),-X github.com/roomlog/roomlog/version.stampModified=true)
build:
	@mkdir -p $(BINDIR)
	$(GO) build -ldflags '$(LDFLAGS)' -o $(BINDIR)/ ./cmd/roomlog ./cmd/dfsmaster-demo

## test: everything CI runs: ZooKeeper and Prometheus install checks, gofmt, go vet, race tests.
test: zookeeper prometheus fmt-check vet unit

zookeeper:
	@bash scripts/install-zookeeper.sh

prometheus:
	@bash scripts/install-prometheus.sh

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet ./...

unit:
	$(GO) test -race -count=1 -timeout 20m ./...

.PHONY: bench
## bench: full benchmark suite against a local 3-server ZooKeeper.
bench: zookeeper
	$(GO) run ./bench $(BENCHFLAGS)

.PHONY: demo
## demo: install ZooKeeper if missing, then run the primary/standby pair demo.
demo: zookeeper
	$(GO) run ./cmd/dfsmaster-demo pair $(DEMOFLAGS)

.PHONY: fuzz
## fuzz: run every fuzz target for FUZZTIME (default 30s each).
FUZZTIME ?= 30s
fuzz:
	@for p in $$($(GO) list ./...); do for f in $$($(GO) test -list '^Fuzz' $$p | grep '^Fuzz'); do echo "== $$p $$f"; $(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) $$p || exit 1; done; done

.PHONY: chaos
## chaos: long seeded fault schedule against 3 replica processes and 3 ZooKeeper servers.
CHAOSFLAGS ?= -duration 10m
chaos: zookeeper
	$(GO) run ./chaos $(CHAOSFLAGS)
