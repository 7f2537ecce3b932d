# CRI tier: a private real containerd 2.x started by the tests themselves
# (internal/testenv/containerd), images built locally (internal/testenv/images).
# containerd, its runc shim and ctr are built from the Go module proxy at CONTAINERD_VERSION and
# cached by version (hack/containerd.sh; Debian bookworm packages only containerd 1.6, which no
# tier runs); the tests find them through EVICTIOND_CONTAINERD_BIN, never in PATH. runc and the
# CNI plugins are Debian's.
EVICTIOND_CACHE    ?= /var/cache/evictiond
CONTAINERD_VERSION ?= v2.2.9
CONTAINERD_BIN     := $(EVICTIOND_CACHE)/containerd/$(CONTAINERD_VERSION)/bin
# Every target that starts the testenv's containerd passes it this way.
CONTAINERD_ENV     := EVICTIOND_CONTAINERD_BIN=$(CONTAINERD_BIN)
CRI_PACKAGES := runc busybox-static containernetworking-plugins
CRI_PKGS     ?= ./internal/testenv/containerd/... ./internal/testenv/images/... ./internal/reclaim/...

.PHONY: containerd-binaries cri-packages test-cri bench-cri
DEPS  += containerd-binaries cri-packages
TIERS += test-cri

containerd-binaries:
	@EVICTIOND_CACHE=$(EVICTIOND_CACHE) CONTAINERD_VERSION=$(CONTAINERD_VERSION) ./hack/containerd.sh >/dev/null

cri-packages:
	./hack/install-deps.sh $(CRI_PACKAGES)

# Needs root (mounts, runc). The testenv packages' own tests prove the environment itself.
test-cri: cri-packages containerd-binaries
	$(CONTAINERD_ENV) $(GO) test -tags integration -count=1 -timeout 15m $(CRI_PKGS)

# Benchmarks against the real containerd (tracking pass, one image removal) and the pure planners.
bench-cri: cri-packages containerd-binaries
	$(CONTAINERD_ENV) $(GO) test -tags integration -run='^$$' -bench=. -benchmem $(CRI_PKGS)
