# CRI tier: a private real containerd (Debian's 1.6) started by the tests themselves
# (internal/testenv/containerd), images built locally (internal/testenv/images).
CRI_PACKAGES := containerd runc busybox-static containernetworking-plugins
CRI_PKGS     ?= ./internal/testenv/containerd/... ./internal/testenv/images/... ./internal/reclaim/...

.PHONY: cri-packages test-cri bench-cri
DEPS  += cri-packages
TIERS += test-cri

cri-packages:
	./hack/install-deps.sh $(CRI_PACKAGES)

# Needs root (mounts, runc). The testenv packages' own tests prove the environment itself.
test-cri: cri-packages
	$(GO) test -tags integration -count=1 -timeout 15m $(CRI_PKGS)

# Benchmarks against the real containerd (tracking pass, one image removal) and the pure planners.
bench-cri: cri-packages
	$(GO) test -tags integration -run='^$$' -bench=. -benchmem $(CRI_PKGS)
