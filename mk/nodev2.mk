# cgroup v2 node tier: a real Kubernetes node as users run it, in qemu (TCG, no KVM needed):
# Debian bookworm booted with systemd as PID 1 and cgroup v2 only (hack/node-v2-rootfs.sh, the
# kernel of hack/vm-kernel.sh), containerd 2.x built from the module proxy (hack/containerd.sh)
# with runc and the systemd cgroup driver, the kubelet of the e2e tier (cgroupDriver: systemd),
# registered with a control plane on this machine (etcd, kube-apiserver, controllers, scheduler
# on random loopback ports, reached from the guest through qemu's user network). evictiond is
# installed from the chart with its default values as a DaemonSet pod, and the scenarios that
# carry the product's claims run on that node (test/nodev2, docs/e2e.md). Needs no machine
# lock: the node's cgroups are the VM's. Everything is cached by version in EVICTIOND_CACHE.
NODEV2_PACKAGES := qemu-system-x86 mmdebstrap e2fsprogs busybox-static
NODEV2_TIMEOUT  ?= 30m
NODEV2_RUN      ?= .

DEPS  += nodev2-deps
TIERS += test-node-v2

.PHONY: nodev2-deps test-node-v2

nodev2-deps: containerd-binaries
	./hack/install-deps.sh $(NODEV2_PACKAGES)
	@EVICTIOND_CACHE=$(EVICTIOND_CACHE) ./hack/node-v2-rootfs.sh >/dev/null

test-node-v2: nodev2-deps k8s-binaries etcd-package helm
	EVICTIOND_VM_KERNEL=$$(EVICTIOND_CACHE=$(EVICTIOND_CACHE) ./hack/vm-kernel.sh) \
	EVICTIOND_NODE_ROOTFS=$$(EVICTIOND_CACHE=$(EVICTIOND_CACHE) ./hack/node-v2-rootfs.sh) \
	$(CONTAINERD_ENV) \
	EVICTIOND_K8S_BIN=$(K8S_BIN) EVICTIOND_HELM=$(HELM) \
		$(GO) test -tags nodev2 -count=1 -timeout $(NODEV2_TIMEOUT) -run '^TestNodeV2$$/$(NODEV2_RUN)' -v ./test/nodev2/

# make bench-node-v2: memory ramps on the cgroup v2 node — the kubelet alone (its threshold at
# 500Mi), evictiond, evictiond with the brake — at 100 MiB/s and the fastest the VM allows (two
# hogs), BENCH_NODE_RUNS runs each; prints the table of docs/benchmarks.md's v2 rows.
BENCH_NODE_RUNS ?= 2
.PHONY: bench-node-v2
bench-node-v2: nodev2-deps k8s-binaries etcd-package helm
	EVICTIOND_VM_KERNEL=$$(EVICTIOND_CACHE=$(EVICTIOND_CACHE) ./hack/vm-kernel.sh) \
	EVICTIOND_NODE_ROOTFS=$$(EVICTIOND_CACHE=$(EVICTIOND_CACHE) ./hack/node-v2-rootfs.sh) \
	$(CONTAINERD_ENV) \
	EVICTIOND_K8S_BIN=$(K8S_BIN) EVICTIOND_HELM=$(HELM) BENCH_NODE_RUNS=$(BENCH_NODE_RUNS) \
		$(GO) test -tags 'nodev2 bench_node' -count=1 -timeout 90m -run '^TestBenchNodeV2$$' -v ./test/nodev2/
