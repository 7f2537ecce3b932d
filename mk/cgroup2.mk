# cgroup v2 tier: a real cgroup v2 kernel (Debian's stock kernel, downloaded and unpacked into
# the cache by hack/vm-kernel.sh, never installed on this machine) booted in qemu (TCG) with an
# initramfs of busybox and static test binaries (internal/testenv/vm). The host test
# (test/cgroup2) builds the v2 integration tests (build tags integration,cgroup2), runs them in
# the VM and reports each guest test as one of its subtests. Needs no lock: the VM uses none of
# this machine's cgroups, and the API server it starts for the agent scenarios uses random ports.
EVICTIOND_CACHE  ?= /var/cache/evictiond
CGROUP2_PACKAGES := qemu-system-x86 busybox-static xz-utils
CGROUP2_TIMEOUT  ?= 20m
CGROUP2_SUITES   ?=

DEPS  += cgroup2-deps
TIERS += test-cgroup2

.PHONY: cgroup2-deps test-cgroup2

cgroup2-deps:
	./hack/install-deps.sh $(CGROUP2_PACKAGES)
	@EVICTIOND_CACHE=$(EVICTIOND_CACHE) ./hack/vm-kernel.sh >/dev/null

# The agent scenarios run evictiond in the VM against a real etcd + kube-apiserver on this
# machine (random loopback ports, reached from the guest through qemu's user networking).
test-cgroup2: cgroup2-deps k8s-binaries etcd-package
	EVICTIOND_VM_KERNEL=$$(EVICTIOND_CACHE=$(EVICTIOND_CACHE) ./hack/vm-kernel.sh) EVICTIOND_K8S_BIN=$(K8S_BIN) \
		EVICTIOND_VM_SUITES=$(CGROUP2_SUITES) $(GO) test -tags cgroup2 -count=1 -timeout $(CGROUP2_TIMEOUT) -run '^TestCgroup2VM$$' -v ./test/cgroup2/

# Figures of the v2 fast path, measured in the VM: crossing -> loop wake latency of a pod's
# memory ramp (adaptive poll vs a fixed 100 ms poll) and the poll's idle CPU (docs/fast-path.md).
.PHONY: bench-cgroup2
# RAMPS=100 ramps per variant (default 40); RAMP_BENCH=/adaptive only the paced poll.
RAMPS      ?=
RAMP_BENCH ?=
bench-cgroup2: cgroup2-deps
	EVICTIOND_VM_KERNEL=$$(EVICTIOND_CACHE=$(EVICTIOND_CACHE) ./hack/vm-kernel.sh) \
		EVICTIOND_VM_RAMPS=$(RAMPS) EVICTIOND_VM_RAMP_BENCH='$(RAMP_BENCH)' \
		$(GO) test -tags cgroup2 -count=1 -timeout 30m -run '^$$' -bench '^BenchmarkCgroup2VM$$' -benchtime 1x -v ./test/cgroup2/
