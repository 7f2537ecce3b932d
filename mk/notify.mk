# Kernel fast path (internal/notify): real memcgs on this machine's cgroup v1
# memory controller, real PSI triggers (/proc/pressure and the cgroup2 hierarchy),
# cgroup v2 memory.events from fixture trees (on a real v2 kernel: make test-cgroup2).
# Needs root; nothing to install.
.PHONY: test-notify bench-notify

TIERS += test-notify

test-notify:
	$(GO) test -tags integration -count=1 -race ./internal/notify

# Wake latency from a threshold crossing to the loop waking (p50/p99), memcg and poll paths;
# the poll's ramp from ~1 GiB away with and without the idle rule (notifier.pollIdleInterval).
bench-notify:
	$(GO) test -tags integration -run '^$$' -bench 'WakeLatencyMemcg' -benchtime 300x ./internal/notify
	$(GO) test -tags integration -run '^$$' -bench 'WakeLatencyPoll(Paced)?$$' -benchtime 100x ./internal/notify
	$(GO) test -tags integration -run '^$$' -bench 'WakeLatencyPollRampFromFar' -benchtime 20x ./internal/notify
	$(GO) test -tags integration -run '^$$' -bench 'PollTickRealMemcg|MemcgRearm' ./internal/notify
