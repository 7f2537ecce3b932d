# Footprint: the figures of issue 29 ("the DaemonSet tax") in one place, printed, not
# asserted. The stripped binary (make build); allocations of one idle pass of the loop
# (BenchmarkIdlePass, internal/node: the cgroup v2 fixture node, fake API server); the
# resident memory and CPU of bin/evictiond idling for 60 s against a real API server and
# containerd (BenchmarkIdleAgent, cmd/evictiond, as make bench-daemon; needs root). The
# real components are shared with other tiers: run it as
#   flock /tmp/evictiond-real.lock make bench-footprint
.PHONY: bench-footprint

bench-footprint: build k8s-binaries etcd-package cri-packages
	@stat -c %s $(BIN) | awk '{printf "binary (stripped)   %d bytes, %.1f MiB\n", $$1, $$1/1048576}'
	@$(GO) test -run '^$$' -bench '^BenchmarkIdlePass$$' -benchmem -count 1 ./internal/node 2>/dev/null | \
		awk '/^BenchmarkIdlePass/ {printf "idle pass           %s allocs/op, %s B/op, %.0f µs/op (BenchmarkIdlePass)\n", $$7, $$5, $$3/1000; ok=1} END {exit !ok}'
	@EVICTIOND_K8S_BIN=$(K8S_BIN) EVICTIOND_BIN=$(CURDIR)/$(BIN) $(GO) test -tags integration -count=1 -timeout 10m \
		-run '^$$' -bench '^BenchmarkIdleAgent$$' -benchtime 1x ./cmd/evictiond 2>&1 | \
		awk '/^BenchmarkIdleAgent/ {for (i = 3; i < NF; i++) v[$$(i+1)] = $$i; \
			printf "idle agent, 60 s    RSS %s MiB (max %s MiB), CPU %s %% of a core (BenchmarkIdleAgent)\n", v["rss-MiB"], v["max-rss-MiB"], v["cpu-%"]; ok=1} \
			{out = out $$0 "\n"} END {if (!ok) printf "%s", out; exit !ok}'
