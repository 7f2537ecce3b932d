# Footprint: the figures of issue 29 ("the DaemonSet tax") in one place, printed, not
# asserted. The stripped binary (make build) and what its packages' initialisation costs every
# process (GODEBUG=inittrace=1: most of the idle RSS is code touched while starting,
# docs/scale.md); allocations of one idle pass of the loop and
# the heap it keeps per pass (BenchmarkIdlePass, internal/node: the cgroup v2 fixture node,
# fake API server); then, on the e2e cluster with the node filled to 110 pods (the kubelet's
# default maxPods), the resident memory and CPU over 60 s of evictiond (deployed from
# deploy/), the kubelet and node_exporter (Debian's, default collectors), each scraped every
# 15 s, and evictiond's mean pass time, allocation rate, collections and container working set
# (TestBenchFootprint, test/e2e). The cluster is shared
# with the e2e tier: run it as
#   flock /tmp/evictiond-cluster.lock make bench-footprint
# (about 4 minutes on this project's machine; FOOTPRINT_WINDOW=5m for a longer window).
# FOOTPRINT_PERF=/tmp/evictiond.perf also records a perf profile of evictiond over the window.
.PHONY: bench-footprint node-exporter-package

FOOTPRINT_WINDOW ?= 60s
FOOTPRINT_PERF ?=

node-exporter-package:
	./hack/install-deps.sh prometheus-node-exporter

bench-footprint: build image k8s-binaries containerd-binaries e2e-deps node-exporter-package
	@stat -c %s $(BIN) | awk '{printf "binary (stripped)   %d bytes, %.1f MiB\n", $$1, $$1/1048576}'
	@GODEBUG=inittrace=1 ./$(BIN) version 2>&1 >/dev/null | awk -v linked=$$($(GO) list -deps ./cmd/evictiond | wc -l) \
		'/^init / {n++; b += $$8} END {printf "package inits       %d packages linked, %d with init work, %.2f MB allocated by them\n", linked, n, b/1e6; exit n == 0}'
	@$(GO) test -run '^$$' -bench '^BenchmarkIdlePass' -benchmem -count 1 ./internal/node 2>/dev/null | \
		awk '/^BenchmarkIdlePass.*allocs\/op/ {for (i = 3; i < NF; i++) v[$$(i+1)] = $$i; \
			printf "%-28s %s allocs/op, %s B/op, %.0f µs/op, %s B kept on the heap per pass\n", $$1, v["allocs/op"], v["B/op"], v["ns/op"]/1000, v["kept-B/pass"]; ok++} \
			END {exit ok < 2}'
	@bash -o pipefail -c "EVICTIOND_K8S_BIN=$(K8S_BIN) $(CONTAINERD_ENV) EVICTIOND_IMAGE_TAR=$(abspath $(IMAGE_TAR)) FOOTPRINT_WINDOW=$(FOOTPRINT_WINDOW) FOOTPRINT_PERF=$(FOOTPRINT_PERF) \
		$(GO) test -tags 'e2e bench_footprint' -count=1 -timeout 20m -run '^TestBenchFootprint$$' -v ./test/e2e/ \
		| grep --line-buffered -E '^footprint:|^(--- FAIL|FAIL)|_test.go:'"
