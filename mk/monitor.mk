# Monitor tier: the real cgroup v1 hierarchy of this machine (run as root: the
# tests create and remove cgroups under /sys/fs/cgroup/{memory,pids}), /proc,
# statfs and the embedded cAdvisor. cgroup v2 and the systemd driver are
# covered by fixture trees in the unit tests.
.PHONY: test-monitor bench-monitor

TIERS += test-monitor

test-monitor:
	$(GO) test -tags integration -count=1 ./internal/monitor/...
	$(GO) test -tags integration -count=1 -run '^TestObserve' ./cmd/evictiond

# Figures for the closing note: one fresh read of the memory signals, and RSS
# and CPU with cAdvisor watching 100 pod cgroups under a 1 s loop.
bench-monitor:
	$(GO) test -tags integration -run='^$$' -bench='ObserveMemory|ObserveFixturePods' -benchmem ./internal/monitor
	$(GO) test -tags integration -run='^$$' -bench='MonitorWatching100Pods' -benchtime=1x ./internal/monitor
