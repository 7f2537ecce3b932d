# Daemon tier: `evictiond run` in-process (and as a process for SIGTERM) against a real
# etcd + kube-apiserver + kube-controller-manager (internal/testenv/apiserver, with its audit
# log counting the agent's writes), a private real containerd 2.x (internal/testenv/containerd)
# and this machine's cgroup v1 hierarchy; /metrics through Debian's promtool; the deploy/
# kustomization and charts/evictiond (helm template with several values files, the
# Prometheus Operator's CRDs installed) through `kubectl apply --dry-run=server`. Needs root.
DAEMON_PACKAGES := prometheus

.PHONY: daemon-packages test-daemon bench-daemon
DEPS  += daemon-packages
TIERS += test-daemon

daemon-packages:
	./hack/install-deps.sh $(DAEMON_PACKAGES)

test-daemon: daemon-packages k8s-binaries etcd-package cri-packages containerd-binaries helm
	EVICTIOND_K8S_BIN=$(K8S_BIN) $(CONTAINERD_ENV) EVICTIOND_HELM=$(HELM) EVICTIOND_PROMETHEUS_OPERATOR_CRDS=$$(./hack/prometheus-operator-crds.sh) $(GO) test -tags integration -count=1 -timeout 15m -run '^Test(Run|Deploy)' ./cmd/evictiond

# Figures for the closing note: binary size, image size, and RSS / CPU of an idle agent
# (bin/evictiond, a real process against the test control plane) over 60 s.
bench-daemon: image daemon-packages k8s-binaries etcd-package cri-packages containerd-binaries
	@ls -l $(BIN) $(IMAGE_TAR) | awk '{print $$5, $$9}'
	EVICTIOND_K8S_BIN=$(K8S_BIN) $(CONTAINERD_ENV) EVICTIOND_BIN=$(CURDIR)/$(BIN) $(GO) test -tags integration -count=1 -timeout 10m \
		-run '^$$' -bench '^BenchmarkIdleAgent$$' -benchtime 1x ./cmd/evictiond
