# End-to-end tier: a real one-node cluster booted on this machine by the tests themselves
# (test/e2e/cluster): etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubelet,
# a private containerd 2.x with a CNI bridge; workload images built from test/e2e/workloads.
# Needs root. Binaries come from hack/k8s-binaries.sh (cached by version, see apiserver.mk) and
# hack/containerd.sh (containerd-binaries, mk/cri.mk); runc and the CNI plugins from Debian.
E2E_DEB_PACKAGES := etcd-server runc containernetworking-plugins busybox-static iproute2
E2E_TIMEOUT      ?= 40m
E2E_RUN          ?= .
# E2E_SKIP: a -skip pattern (empty: nothing skipped; TestSoak's short form runs here).
E2E_SKIP         ?=

DEPS  += e2e-deps e2e-prometheus
TIERS += test-e2e

.PHONY: e2e-deps e2e-prometheus test-e2e

e2e-deps:
	./hack/install-deps.sh $(E2E_DEB_PACKAGES)

# Prometheus with Kubernetes service discovery (Debian's package has none), cached by version.
e2e-prometheus:
	@EVICTIOND_CACHE=$(EVICTIOND_CACHE) ./hack/prometheus.sh >/dev/null

test-e2e: k8s-binaries containerd-binaries e2e-deps e2e-prometheus helm
	EVICTIOND_K8S_BIN=$(K8S_BIN) $(CONTAINERD_ENV) EVICTIOND_PROMETHEUS=$$(EVICTIOND_CACHE=$(EVICTIOND_CACHE) ./hack/prometheus.sh) EVICTIOND_HELM=$(HELM) \
		$(GO) test -tags e2e -count=1 -timeout $(E2E_TIMEOUT) -run '$(E2E_RUN)' -skip '$(E2E_SKIP)' -v ./test/e2e/...

# make bench-ramp: memory ramps at 100/400/1000/4000 MiB/s and the machine's top rate (two
# hogs at 4000 in one pod) against the kubelet's eviction and evictiond (notifier with and
# without the brake, poll-only) on the same node, BENCH_RAMP_RUNS runs per rate; prints a
# markdown table with the median and worst latencies (also written to $(BENCH_RAMP_OUT)).
# See docs/benchmarks.md. BENCH_RAMP_SETUPS picks setups (notifier, brake, brake-memcg-off,
# memcg-off, poll, kubelet-only; the fork bomb vs pid.available: bomb-kubelet-only, bomb,
# bomb-brake; the disk filler vs nodefs.available: disk-kubelet-only, disk, disk-brake),
# BENCH_RAMP_RATES rates (100, 400, 1000, 4000, max).
BENCH_RAMP_OUT    ?= bin/bench-ramp.md
BENCH_RAMP_SETUPS ?=
BENCH_RAMP_RATES  ?=
BENCH_RAMP_RUNS   ?= 3

.PHONY: bench-ramp
bench-ramp: k8s-binaries containerd-binaries e2e-deps
	@mkdir -p $(dir $(BENCH_RAMP_OUT))
	EVICTIOND_K8S_BIN=$(K8S_BIN) $(CONTAINERD_ENV) BENCH_RAMP_OUT=$(abspath $(BENCH_RAMP_OUT)) BENCH_RAMP_SETUPS=$(BENCH_RAMP_SETUPS) \
		BENCH_RAMP_RATES=$(BENCH_RAMP_RATES) BENCH_RAMP_RUNS=$(BENCH_RAMP_RUNS) \
		$(GO) test -tags 'e2e bench_ramp' -count=1 -timeout 120m -run '^TestBenchRamp$$' -v ./test/e2e/

# make demo-cluster (what `make demo` runs): the newcomer's first command — boots the local
# cluster, deploys evictiond, plays one memory-pressure episode, narrates it, cleans up.
.PHONY: demo-cluster
demo-cluster: k8s-binaries containerd-binaries e2e-deps
	@bash -o pipefail -c "EVICTIOND_K8S_BIN=$(K8S_BIN) $(CONTAINERD_ENV) $(GO) test -tags 'e2e demo' -count=1 -timeout 15m -run '^TestDemo$$' -v ./test/e2e/ \
		| grep --line-buffered -E '^(demo:|--- FAIL|FAIL)|_test.go:'"

# make e2e-clean: removes what an interrupted e2e run or bench left (processes started from
# its directories, kubepods cgroups, mounts, the CNI bridge, container log links, the
# directories: test/e2e/cluster/leftovers.go). It waits for every tier's lock first, so it
# never touches a run in progress.
.PHONY: e2e-clean
e2e-clean:
	flock /tmp/evictiond-cluster.lock flock /tmp/evictiond-real.lock flock /tmp/evictiond-vm.lock \
		$(GO) run -tags e2e ./hack/e2e-clean
