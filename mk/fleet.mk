# make bench-fleet: a fleet of agents against one real API server (etcd on /dev/shm):
# FLEET_NODES Nodes holding FLEET_PODS pods, one agent per node built from the daemon's
# own parts with synthetic memory readings; a quiet phase (FLEET_QUIET) and a storm where
# every node crosses its hard threshold at once (FLEET_STORM). Prints the table of
# docs/scale.md. Not part of make test: it takes the machine for several minutes.
FLEET_NODES ?= 200
FLEET_PODS  ?= 20000
FLEET_QUIET ?= 60s
FLEET_STORM ?= 20s
FLEET_FLAP  ?= 30s

.PHONY: bench-fleet
bench-fleet: k8s-binaries etcd-package cri-packages containerd-binaries
	$(CONTAINERD_ENV) FLEET_NODES=$(FLEET_NODES) FLEET_PODS=$(FLEET_PODS) FLEET_QUIET=$(FLEET_QUIET) FLEET_STORM=$(FLEET_STORM) FLEET_FLAP=$(FLEET_FLAP) \
	EVICTIOND_K8S_BIN=$(K8S_BIN) $(GO) test -tags integration -count=1 -timeout 30m \
		-run '^$$' -bench '^BenchmarkFleet$$' -benchtime 1x ./cmd/evictiond
