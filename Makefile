# podnet — build and test. `make test` is the one test command (CI runs it
# as root on a fresh machine); `make run` is the main job on one machine.

GO       ?= go
BIN      ?= $(CURDIR)/bin
# Plugins get their own directory: the main plugin is called podnet, like
# the CLI.
PLUGIN_BIN ?= $(BIN)/cni
PLUGINS  := loopback podnet podnet-ipam podnet-portmap
# The release this tree becomes (VERSION, at the top of the tree): `make
# release` stamps it as it is, every other build as VERSION-dev, with the
# commit when the tree is a git checkout (podnet version, the agent's log,
# /readyz and podnet_build_info say them).
VERSION  ?= $(shell cat $(CURDIR)/VERSION)
BUILD_VERSION ?= $(VERSION)-dev
REVISION ?= $(shell r=$$(git -C $(CURDIR) rev-parse HEAD 2>/dev/null) && { git -C $(CURDIR) diff --quiet HEAD 2>/dev/null && echo $$r || echo $$r-dirty; })
LDFLAGS  := -X github.com/podnet/podnet/version.version=$(BUILD_VERSION) -X github.com/podnet/podnet/version.revision=$(REVISION)
GOFLAGS_BUILD := -trimpath -ldflags '$(LDFLAGS)'
# Static binaries: CNI plugins are exec'd for every pod, and a dynamically
# linked one (cgo's resolver comes with package net) pays ~1 ms of ld.so
# on every exec. Only for builds: go test -race needs cgo.
STATIC := CGO_ENABLED=0

.PHONY: all build plugins test test-unit test-interop test-deploy vet fuzz run clean deps crd-cnp helm-package

all: build

build: plugins
	$(STATIC) $(GO) build $(GOFLAGS_BUILD) -o $(BIN)/podnet ./cmd/podnet

plugins:
	@mkdir -p $(PLUGIN_BIN)
	@for p in $(PLUGINS); do $(STATIC) $(GO) build $(GOFLAGS_BUILD) -o $(PLUGIN_BIN)/$$p ./plugins/$$p || exit 1; done

# staticcheck at a pinned version, run from the module cache: nothing to
# install, and every machine checks with the same rules.
STATICCHECK ?= $(GO) run honnef.co/go/tools/cmd/staticcheck@v0.8.2

vet:
	@test -z "$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))" || { gofmt -l .; echo "gofmt needed"; exit 1; }
	$(GO) vet ./...
	cd interop && $(GO) vet ./...
	cd deploy/kubernetes/manifesttest && $(GO) vet ./...
	cd test/k8s && $(GO) vet ./...
	$(STATICCHECK) ./...
	cd interop && $(STATICCHECK) ./...
	cd deploy/kubernetes/manifesttest && $(STATICCHECK) ./...
	cd test/k8s && $(STATICCHECK) ./...

# Root tests create their own network namespaces; with CI set, a root test
# that would skip fails instead.
test: deps vet test-unit test-interop test-deploy test-k8s

test-unit:
	$(GO) test -race -count=1 -timeout 30m ./...

test-interop:
	cd interop && $(GO) test -count=1 -timeout 20m ./...

# The Kubernetes manifests of both models, decoded strictly with the API
# types (a module of its own, for the API machinery's test dependencies).
# TestNetValidate builds podnet and its plugins without -race: from an empty
# build cache on a loaded machine that alone took more than go test's
# default 10 minutes.
test-deploy:
	cd deploy/kubernetes/manifesttest && $(GO) test -count=1 -timeout 30m ./...

# The ClusterNetworkPolicy CRD, byte for byte the experimental channel's
# of the network-policy-api module go.mod requires (podnet reads nodes
# peers and named ports, which the standard channel's schema prunes).
# Run it after changing that requirement; manifesttest's
# TestClusterNetworkPolicyCRD fails until it is run. The Helm chart
# renders the same file (TestChartFilesAreShipped).
CNP_CRD := policy.networking.k8s.io_clusternetworkpolicies.yaml
crd-cnp:
	install -m 0644 "$$($(GO) list -m -f '{{.Dir}}' sigs.k8s.io/network-policy-api)/config/crd/experimental/$(CNP_CRD)" \
		deploy/kubernetes/clusternetworkpolicy/$(CNP_CRD)
	install -m 0644 deploy/kubernetes/clusternetworkpolicy/$(CNP_CRD) deploy/helm/podnet/files/clusternetworkpolicy/$(CNP_CRD)

# The Helm chart as dist/podnet-VERSION.tgz, written with Helm's own Go
# packages after Helm's linter passed it (no helm binary needed). The
# chart is checked against the plain manifests by make test-deploy.
helm-package:
	cd deploy/kubernetes/manifesttest && $(GO) run ./cmd/helmpackage -chart ../../helm/podnet -out $(CURDIR)/dist

# Each fuzz target for FUZZTIME (default 2m).
FUZZTIME ?= 2m
fuzz:
	for f in FuzzParseNetworkConfigList FuzzParseResult FuzzParseArgs FuzzIsIdentifier; do \
		$(GO) test ./cni -run XXX -fuzz "^$$f$$" -fuzztime $(FUZZTIME) || exit 1; done
	$(GO) test ./internal/minihttp -run XXX -fuzz '^FuzzReadResponse$$' -fuzztime $(FUZZTIME)

# Tools the tests use from the system (root, Debian): iproute2 (ip, tc) and
# util-linux's unshare for the interop tests, nftables and iptables for the
# reference portmap plugin and for inspecting state in assertions.
DEP_TOOLS := ip tc nft iptables ip6tables unshare
deps:
	@for t in $(DEP_TOOLS); do command -v $$t >/dev/null || missing=1; done; [ -z "$$missing" ] || { \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq iproute2 nftables iptables >/dev/null; }

# The data path (docs/performance.md): iperf3 throughput and sockperf
# request/response on every path, podnet's against a veth floor, the
# reference plugins and the underlay, in one benchmark run where the paths
# take turns (interop's BenchmarkDataPath). Root; not part of `make test`.
# DATAPATH_ROUNDS rounds of DATAPATH_SECONDS per run (each path: one
# iperf3 and one sockperf run per round; about a minute per round);
# DATAPATH_COUNT > 1 repeats it all on fresh namespaces, for benchstat.
# iperf3 and sockperf come from Debian, iperf3 told not to start its daemon.
DATAPATH_ROUNDS  ?= 5
DATAPATH_SECONDS ?= 3
DATAPATH_COUNT   ?= 1
.PHONY: bench-datapath
bench-datapath: deps
	@command -v iperf3 >/dev/null && command -v sockperf >/dev/null || { \
		apt-get update -qq && echo "iperf3 iperf3/start_daemon boolean false" | debconf-set-selections && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq iperf3 sockperf >/dev/null; }
	cd interop && PODNET_DATAPATH_SECONDS=$(DATAPATH_SECONDS) $(GO) test -run '^$$' -bench '^BenchmarkDataPath$$' \
		-benchtime $(DATAPATH_ROUNDS)x -count $(DATAPATH_COUNT) -timeout 120m -v .

# podnet's image without a registry or a container engine: the static
# binaries at deploy/Containerfile's paths, written as an OCI image
# archive that `ctr images import`, `podman load` and `docker load` read.
# BIN must be absolute.
IMAGE     ?= podnet.test/podnet:dev
IMAGE_TAR ?= $(BIN)/podnet-image.tar
.PHONY: image
image: build
	cd test/k8s && $(GO) run ./cmd/podnet-image -bin $(BIN) -o $(IMAGE_TAR) -name $(IMAGE)

# A release, everything a user installs without building anything, in
# DIST: the image archive ghcr.io/podnet/podnet:VERSION (podnet-image-
# VERSION.tar: `ctr -n k8s.io images import`, `podman load`, `docker load`
# or a push to the registry), one manifest per deployment for `kubectl
# apply -f` (podnet-VERSION.yaml, -blocks-, -etcd-, -uninstall-), the Helm
# chart's archive and SHA256SUMS. Binaries say VERSION, not VERSION-dev.
DIST ?= $(CURDIR)/dist
.PHONY: release
release:
	@echo "$(VERSION)" | grep -Eq '^[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$$' || \
		{ echo "make release: VERSION=$(VERSION) is not x.y.z" >&2; exit 1; }
	rm -rf $(abspath $(DIST)) && mkdir -p $(abspath $(DIST))
	$(MAKE) image BUILD_VERSION=$(VERSION) BIN=$(abspath $(DIST))/.bin \
		IMAGE=ghcr.io/podnet/podnet:$(VERSION) IMAGE_TAR=$(abspath $(DIST))/podnet-image-$(VERSION).tar
	rm -rf $(abspath $(DIST))/.bin
	cd deploy/kubernetes/manifesttest && $(GO) run ./cmd/release -root $(CURDIR) -version $(VERSION) -out $(abspath $(DIST))
	cd $(abspath $(DIST)) && sha256sum podnet-* > SHA256SUMS

# podnet on a real single-node Kubernetes cluster (test/k8s, a module of
# its own so that podnet's does not depend on k8s.io/kubernetes). Root.
# The first run builds Kubernetes into ~/.cache/podnet-k8s (minutes; about
# 3.5 GB of disk during the build) and installs containerd and runc from
# apt when they are missing; TestContainerdMatrix also builds containerd
# 1.7 and 2.x there (a few minutes more, once). PODNET_K8S_CONTAINERD=1.7
# or 2.x runs the node on one of those instead of Debian's 1.6.
.PHONY: test-k8s
# TestClusterNetworkPolicyConformance is left out: its cluster and setup
# alone take over 6 minutes (make conformance runs it; docs/conformance.md).
test-k8s:
	cd test/k8s && $(GO) test -count=1 -timeout 80m -skip '^TestClusterNetworkPolicyConformance$$' ./...

# The upstream Kubernetes e2e networking specs that test/k8s/conformance
# selects (docs/conformance.md), run by e2e.test v1.34.4 against a
# two-node cluster (root): podnet deployed from deploy/kubernetes
# (deploy/kubernetes/blocks with CONFORMANCE_VARIANT=blocks), the
# reference chain with CONFORMANCE_CHAIN=refchain, or, with
# CONFORMANCE_CHAIN=kube-router, podnet without its policy service and
# kube-router v2.1.0's network policy controller (the policy peer,
# built into the harness's cache) enforcing NetworkPolicy; kube-proxy in
# PROXY_MODE (iptables or nftables). CONFORMANCE_FOCUS (a regexp) narrows
# the selection (CONFORMANCE_FOCUS=Netpol: the NetworkPolicy specs alone),
# CONFORMANCE_PROCS sets the parallel e2e.test processes, and
# CONFORMANCE_ENCRYPTION=wireguard turns WireGuard on (the ConfigMap's
# encryption key; results in <...>-wireguard-<mode>/), and
# CONFORMANCE_CNP_PASS=1 puts an Admin ClusterNetworkPolicy that passes
# everything in place first (podnet; results in <...>-cnppass-<mode>/).
# The first run builds e2e.test into the harness's cache (many minutes).
# Reports and a log per spec go to CONFORMANCE_DIR/<chain>[-blocks]-<mode>/; it
# ends with "N passed, N failed, N skipped".
# Beside them, on a cluster of its own, the ClusterNetworkPolicy
# conformance suite of sigs.k8s.io/network-policy-api v0.3.0
# (TestClusterNetworkPolicyConformance; results in
# CONFORMANCE_DIR/cnp[-blocks]-<mode>/): in a whole run of podnet, and in
# one narrowed by CONFORMANCE_FOCUS only when CNP_FOCUS (a regexp on the
# suite's test names) is set too; never with the reference chain, which
# enforces no policy, nor with kube-router, which enforces no
# ClusterNetworkPolicy. make conformance-cnp runs that suite alone.
CONFORMANCE_CHAIN   ?= podnet
CONFORMANCE_VARIANT ?= default
PROXY_MODE          ?= iptables
CONFORMANCE_FOCUS   ?=
CONFORMANCE_PROCS   ?= 4
CONFORMANCE_DIR     ?= $(CURDIR)/conformance-results
CNP_FOCUS           ?=
CONFORMANCE_CNP_PASS ?=
CONFORMANCE_ENCRYPTION ?=
CONFORMANCE_CNP     := $(if $(filter podnet,$(CONFORMANCE_CHAIN)),$(if $(strip $(CONFORMANCE_FOCUS)),$(strip $(CNP_FOCUS)),yes))
CONFORMANCE_TESTS   := $(if $(CONFORMANCE_CNP),(TestConformance|TestClusterNetworkPolicyConformance),TestConformance)
.PHONY: conformance conformance-cnp
conformance: deps
	cd test/k8s && PODNET_CONFORMANCE=1 PODNET_CONFORMANCE_CHAIN=$(CONFORMANCE_CHAIN) \
		PODNET_CONFORMANCE_VARIANT=$(CONFORMANCE_VARIANT) \
		PODNET_K8S_PROXY_MODE=$(PROXY_MODE) PODNET_CONFORMANCE_FOCUS='$(CONFORMANCE_FOCUS)' \
		PODNET_CONFORMANCE_PROCS=$(CONFORMANCE_PROCS) PODNET_CONFORMANCE_DIR=$(CONFORMANCE_DIR) \
		PODNET_CNP_FOCUS='$(CNP_FOCUS)' PODNET_CONFORMANCE_CNP_PASS=$(CONFORMANCE_CNP_PASS) \
		PODNET_CONFORMANCE_ENCRYPTION=$(CONFORMANCE_ENCRYPTION) \
		$(GO) test -count=1 -v -run '^$(CONFORMANCE_TESTS)$$' -timeout 330m .

conformance-cnp: deps
	cd test/k8s && PODNET_CONFORMANCE_VARIANT=$(CONFORMANCE_VARIANT) PODNET_K8S_PROXY_MODE=$(PROXY_MODE) \
		PODNET_CONFORMANCE_ENCRYPTION=$(CONFORMANCE_ENCRYPTION) \
		PODNET_CNP_FOCUS='$(CNP_FOCUS)' PODNET_CONFORMANCE_DIR=$(CONFORMANCE_DIR) \
		$(GO) test -count=1 -v -run '^TestClusterNetworkPolicyConformance$$' -timeout 150m .

run: deps build
	$(CURDIR)/scripts/demo.sh $(BIN)

clean:
	rm -rf $(BIN) interop/bin dist
