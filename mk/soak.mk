# make soak: evictiond on the one-node e2e cluster for SOAK_DURATION: cycles of a pressure
# episode (memory, disk, PIDs in turn), a ConfigMap reload and an API server or containerd
# restart; prints the agent's RSS, open fds and goroutines (first, last, max, fitted slope per
# hour) and its API requests per hour from the audit log, and fails on growth of goroutines or
# fds. `make soak SOAK_DURATION=3m` is the short form (the one make test-e2e runs).
# The cluster lock is held for the whole run: 60 minutes takes the machine for an hour.
SOAK_DURATION ?= 60m
SOAK_TIMEOUT  ?= 100m

.PHONY: soak
soak: k8s-binaries containerd-binaries e2e-deps
	EVICTIOND_K8S_BIN=$(K8S_BIN) $(CONTAINERD_ENV) EVICTIOND_SOAK_DURATION=$(SOAK_DURATION) \
		$(GO) test -tags e2e -count=1 -timeout $(SOAK_TIMEOUT) -run '^TestSoak$$' -v ./test/e2e/
