# API server test tier: a real etcd + kube-apiserver + kube-controller-manager started by
# the tests themselves (internal/testenv/apiserver). Binaries are built from the Go module
# proxy and cached by version (hack/k8s-binaries.sh); etcd comes from Debian.
EVICTIOND_CACHE ?= /var/cache/evictiond
K8S_VERSION     ?= v1.35.4
K8S_BIN         := $(EVICTIOND_CACHE)/k8s/$(K8S_VERSION)/bin
APISERVER_PKGS  ?= ./internal/kube/... ./internal/metricsserver/... ./internal/testenv/apiserver/... ./test/apf/...

DEPS  += k8s-binaries etcd-package
TIERS += test-apiserver

.PHONY: k8s-binaries etcd-package test-apiserver bench-apiserver bench-apf

k8s-binaries:
	EVICTIOND_CACHE=$(EVICTIOND_CACHE) K8S_VERSION=$(K8S_VERSION) ./hack/k8s-binaries.sh

etcd-package:
	./hack/install-deps.sh etcd-server

# One test of this tier (local stop through the CRI while the API server is down) runs a
# real pod sandbox in a private containerd: cri-packages and containerd-binaries come from mk/cri.mk.
test-apiserver: k8s-binaries etcd-package cri-packages containerd-binaries
	EVICTIOND_K8S_BIN=$(K8S_BIN) $(CONTAINERD_ENV) $(GO) test -tags integration -count=1 -timeout 20m $(APISERVER_PKGS)

# Benchmarks against the real API server (eviction call, condition re-assert round trip,
# node-scoped informer sync with and without pods elsewhere) and the pure node status path.
bench-apiserver: k8s-binaries etcd-package cri-packages containerd-binaries
	EVICTIOND_K8S_BIN=$(K8S_BIN) $(CONTAINERD_ENV) $(GO) test -tags integration -run='^$$' -bench=. -benchmem -benchtime=100x ./internal/kube/...

# make bench-apf: the latency of the agent's evictions while a workload's request loops
# saturate the API server's workload-low priority level, without and with
# deploy/flowcontrol.yaml (the test in test/apf asserts the classification; this prints
# the figures it logs).
bench-apf: k8s-binaries etcd-package
	@bash -o pipefail -c "EVICTIOND_K8S_BIN=$(K8S_BIN) $(GO) test -tags integration -count=1 -timeout 10m -v \
		-run '^TestEvictionsBypassSaturatedWorkloadLevelWithTheFlowSchema$$' ./test/apf/ \
		| grep --line-buffered -E 'eviction latency|competing load|^(--- |FAIL|ok|PASS)'"
