# Brake tier: freeze, thaw and kill of pod cgroups on this machine's real
# cgroup v1 freezer and memory controllers (run as root: the tests create and
# remove cgroups under /sys/fs/cgroup/{freezer,memory}). The brake's decision
# is unit-tested in internal/policy; its use by the agent in the e2e tier. Also the realtime
# boost (internal/rtboost: SCHED_FIFO, its bounds, the RT group budget on this kernel).
.PHONY: test-brake bench-brake

TIERS += test-brake

test-brake:
	$(GO) test -tags integration -count=1 -timeout 5m ./internal/brake/... ./internal/rtboost/...

# How long a freeze + thaw of a pod cgroup takes on this machine.
bench-brake:
	$(GO) test -tags integration -run='^$$' -bench=. -benchtime=200x ./internal/brake/...
