# Monitor tier: the real cgroup v1 hierarchy of this machine (run as root: the
# tests create and remove cgroups under /sys/fs/cgroup/*), /proc, statfs, the
# embedded cAdvisor, and a private real containerd 2.x running a pod (CRI
# imagefs, writable layers, container names). cgroup v2 and the systemd driver
# are covered by fixture trees in the unit tests and on a real v2 kernel by make test-cgroup2.
# containerd itself: containerd-binaries (mk/cri.mk).
MONITOR_PACKAGES := runc busybox-static

.PHONY: monitor-packages test-monitor bench-monitor

DEPS  += monitor-packages
TIERS += test-monitor

monitor-packages:
	./hack/install-deps.sh $(MONITOR_PACKAGES)

test-monitor: monitor-packages containerd-binaries
	$(CONTAINERD_ENV) $(GO) test -tags integration -count=1 -timeout 10m ./internal/monitor/...
	$(CONTAINERD_ENV) $(GO) test -tags integration -count=1 -timeout 5m -run '^TestObserve' ./cmd/evictiond

# Figures for the closing note: a fresh read of the memory signals and of 100
# pods, and RSS and CPU with cAdvisor watching 100 pod cgroups under a 1 s loop
# (one process per scenario, see BenchmarkMonitorWatching100Pods).
MONITOR_LOOP_BENCHES := cadvisor=root/housekeeping=10s/loop=signals$$ cadvisor=root/housekeeping=10s/loop=signals[+]pods$$ cadvisor=pods/housekeeping=10s/loop=signals$$ cadvisor=pods/housekeeping=1s/loop=signals$$
bench-monitor: containerd-binaries
	$(CONTAINERD_ENV) $(GO) test -tags integration -run='^$$' -bench='ObserveMemory|ObservePods100|ObserveFixturePods' -benchmem ./internal/monitor
	$(GO) test -tags integration -c -o bin/monitor-integration.test ./internal/monitor
	for b in $(MONITOR_LOOP_BENCHES); do \
		$(CONTAINERD_ENV) ./bin/monitor-integration.test -test.run='^$$' -test.bench="MonitorWatching100Pods/$$b" -test.benchtime=1x 2>/dev/null | grep Benchmark || exit 1; \
	done

# Bounded fuzzing of the pressure-file parser, with the tier.
test-monitor: fuzz-monitor
.PHONY: fuzz-monitor
fuzz-monitor:
	GO=$(GO) hack/fuzz.sh ./internal/monitor FuzzParsePSI $(FUZZTIME)
