# Cubby build, code generation and tests.
GO      ?= go
BIN     ?= bin/cubby
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -s -w -X github.com/cubby-dev/cubby/internal/cli.Version=$(VERSION)

.PHONY: all build baseline generate web templates test test-host deps-test test-unit test-integration test-compat test-leaks test-k8s k8s-tools manifests quickstart bench fmt vet clean

all: build

## build: the static cubby binary (server, agent and CLI in one), in bin/cubby, and the pinned runc next to it
build: runc
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/cubby

## generate: the envd Connect code in internal/envdpb from proto/envd (buf, protoc-gen-go, protoc-gen-connect-go) and the
## REST types and client from api/*.yaml (oapi-codegen); the generators are pinned in tools/generate/go.mod and run with
## `go tool` (Go and the module proxy are all a fresh machine needs). The protobuf and Connect generators must be the
## versions of the runtime libraries in go.mod.
GENERATE := $(GO) tool -modfile=tools/generate/go.mod
generate:
	@for m in google.golang.org/protobuf connectrpc.com/connect; do \
		want=$$($(GO) list -m -f '{{.Version}}' $$m); got=$$($(GO) list -modfile=tools/generate/go.mod -m -f '{{.Version}}' $$m); \
		[ "$$want" = "$$got" ] || { echo "generate: $$m is $$want in go.mod but $$got in tools/generate/go.mod"; exit 1; }; done
	$(GENERATE) buf generate proto/envd --template proto/buf.gen.yaml
	$(GO) generate ./internal/api/... ./sdk/internal/apiclient/...

## web: vendor the dashboard's browser code (xterm.js, pinned and integrity-checked from npm) into internal/dashboard/web/static/vendor; the output is committed
web:
	scripts/vendor-web.sh

TEMPLATES ?= $(CURDIR)/.cache/templates
export CUBBY_TEMPLATES_DIR := $(TEMPLATES)

## test: everything CI runs: host test deps, then two lanes at once: vet, unit tests, integration tests against the real
## server and the official SDK suites against both SDK sets (pinned and latest); and the cluster tiers (the Kubernetes
## build, cached by content, then test-k8s); then a check that no stopped server left its bridge or nftables table
test: deps-test
	$(MAKE) -j2 --output-sync=target test-host test-k8s
	$(MAKE) test-leaks

test-host: vet test-unit test-integration test-compat

deps-test:
	scripts/install-deps.sh --test

## templates: build the built-in templates the tests use (base, code-interpreter) into $(TEMPLATES) (cached; rebuilt only when their definition changes)
templates: build
	$(BIN) template build base --templates-dir $(TEMPLATES)
	$(BIN) template build code-interpreter --templates-dir $(TEMPLATES)

test-unit:
	$(GO) test -race -count=1 -timeout 20m $$($(GO) list ./... | grep -v -e /test/ -e /sdk -e /examples/)

## baseline: the cubby of the release before agents took a link credential instead of the clients' tokens (commit
## BASELINE), built once from this repository's history; the upgrade test starts its sandboxes with it
BASELINE     ?= 93b342d
BASELINE_BIN := $(CURDIR)/.cache/baseline/$(BASELINE)/cubby
baseline:
	scripts/build-baseline.sh $(BASELINE) $(BASELINE_BIN)

test-integration: templates runsc runc baseline
	CUBBY_BIN=$(CURDIR)/$(BIN) CUBBY_BASELINE_BIN=$$(test -x $(BASELINE_BIN) && echo $(BASELINE_BIN)) $(GO) test -count=1 -timeout 20m ./test/integration/... ./test/security/... ./test/cli/... ./test/mcp/... ./test/dashboard/... ./sdk/... ./examples/go/...

test-compat: templates
	CUBBY_COMPAT_SKIP_BUILD=1 test/compat/run.sh --sdk all

## test-leaks: fails when bridges or nftables tables of servers that are not running remain (servers are
## identified by their bridge lock; servers of older versions hold none)
test-leaks: build
	$(BIN) network leaks

## test-k8s: the cluster tiers: T1 (a real kube-apiserver + etcd: the kubernetes backend, the PostgreSQL store, the chart),
## T2 (+ scheduler, controller manager, kwok nodes: replicas at scale) and T3 (+ a real kubelet and containerd node: the
## official SDKs through two replicas); each tier's time is printed
test-k8s: k8s-tools templates
	@t=$$(date +%s); CUBBY_BIN=$(CURDIR)/$(BIN) $(GO) test -count=1 -timeout 20m ./internal/backend/kube/ ./internal/store/... \
		&& echo "test-k8s: T1 (API server, PostgreSQL) took $$(( $$(date +%s) - t )) s"
	@t=$$(date +%s); CUBBY_BIN=$(CURDIR)/$(BIN) $(GO) test -count=1 -timeout 30m -run 'TestChart|TestHundred|TestReaper|TestRacing|TestEviction|TestStoreLost|TestAPIServerLost|TestUnsupported' ./test/cluster/ \
		&& echo "test-k8s: T1 chart + T2 (simulated cluster) took $$(( $$(date +%s) - t )) s"
	@t=$$(date +%s); CUBBY_BIN=$(CURDIR)/$(BIN) $(GO) test -count=1 -timeout 40m -run 'TestNode|TestOfficialSDKs' ./test/cluster/ \
		&& echo "test-k8s: T3 (real node, official SDKs) took $$(( $$(date +%s) - t )) s"

## k8s-tools: kube-apiserver, kube-controller-manager, kube-scheduler, kubelet, helm, kwok and etcd in bin/k8s, built from
## the pinned tools modules tools/{k8s,kwok,etcd} (cached by content in .cache/k8s-tools)
k8s-tools:
	scripts/k8s-tools.sh

## manifests: the plain manifests deploy/manifests/cubby.yaml, rendered from the Helm chart (default values, namespace cubby)
manifests: k8s-tools
	bin/k8s/helm template cubby deploy/helm/cubby --namespace cubby > deploy/manifests/cubby.yaml

## quickstart: install what is missing, build, start the server and run a real example with the official SDK
quickstart:
	scripts/quickstart.sh

bench: build
	CUBBY_BIN=$(CURDIR)/$(BIN) bench/run.sh

## runsc: gVisor's runsc OCI runtime in bin/runsc, built from the pinned tools module tools/runsc (stripped; cached: rebuilt only when that module changes)
RUNSC ?= bin/runsc
.PHONY: runsc
runsc: $(RUNSC)

$(RUNSC): tools/runsc/go.mod tools/runsc/go.sum
	cd tools/runsc && CGO_ENABLED=0 $(GO) build -trimpath -o $(abspath $(RUNSC)) \
		-ldflags "-s -w -X gvisor.dev/gvisor/runsc/version.version=$$($(GO) list -m -f '{{.Version}}' gvisor.dev/gvisor)" \
		gvisor.dev/gvisor/runsc

## runc: the runc OCI runtime in bin/runc, built from the pinned tools module tools/runc (cgo with libseccomp, as
## runc's own release builds; stripped; cached: rebuilt only when that module changes). The server prefers it to PATH.
RUNC ?= bin/runc
.PHONY: runc
runc: $(RUNC)

$(RUNC): tools/runc/go.mod tools/runc/go.sum
	cd tools/runc && CGO_ENABLED=1 $(GO) build -trimpath -tags "seccomp urfave_cli_no_docs" -ldflags "-s -w" \
		-o $(abspath $(RUNC)) github.com/opencontainers/runc

fmt:
	gofmt -l -w $$(git ls-files '*.go')

vet:
	$(GO) vet ./...

clean:
	rm -rf bin
