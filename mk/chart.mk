# Chart tier: charts/evictiond is the one source of the manifests; deploy/ is rendered from
# it (make render-deploy). Helm is built from the Go module proxy and cached by version
# (hack/helm.sh, tools module hack/tools/helm); nothing here needs root or a cluster. The
# chart's objects against a real API server (with the Prometheus Operator's CRDs) are
# checked in the daemon tier (TestDeployChart*), `helm install` in the e2e tier.
HELM = $(shell EVICTIOND_CACHE=$(EVICTIOND_CACHE) ./hack/helm.sh)
CHART := charts/evictiond
CHART_TEST_VALUES := $(wildcard test/chart/values-*.yaml)

DEPS  += helm
TIERS += test-chart test-alerts test-dashboard

.PHONY: helm render-deploy test-chart test-alerts test-dashboard

helm:
	@EVICTIOND_CACHE=$(EVICTIOND_CACHE) ./hack/helm.sh >/dev/null

# After any change to the chart: regenerate deploy/ and commit both.
render-deploy: helm
	HELM=$(HELM) ./hack/render-deploy.sh

# deploy/ equals the chart's render; helm lint (strict) with the default values and each
# test/chart/values-*.yaml; a pool the default pool cannot exclude is refused by name; a
# misspelt value is refused by values.schema.json.
test-chart: helm
	HELM=$(HELM) ./hack/render-deploy.sh --check
	$(HELM) lint --strict $(CHART)
	for v in $(CHART_TEST_VALUES); do $(HELM) lint --strict $(CHART) -f $$v || exit 1; done
	@out=$$($(HELM) template x $(CHART) --set-json 'nodePools=[{"name":"gpu","nodeSelector":{"a":"1","b":"2"}}]' 2>&1); \
		echo "$$out" | grep -q 'nodePools\[0\].nodeSelector: .* has 2 labels' || \
		{ echo "a pool with two labels was not refused by name: $$out"; exit 1; }
	@out=$$($(HELM) template x $(CHART) --kube-version v1.31.9 2>&1); \
		echo "$$out" | grep -q 'chart requires kubeVersion: >= 1.32.0-0 which is incompatible with Kubernetes v1.31.9' || \
		{ echo "a cluster older than the chart's kubeVersion was not refused: $$out"; exit 1; }
	@$(HELM) template x $(CHART) --kube-version v1.32.1-eks-0123abc >/dev/null || \
		{ echo "a provider's v1.32 build was refused by the chart's kubeVersion"; exit 1; }
	@out=$$($(HELM) template x $(CHART) --set nodePool.name=gpu 2>&1); \
		echo "$$out" | grep -q "additional properties 'nodePool' not allowed" || \
		{ echo "a misspelt value was not refused by values.schema.json: $$out"; exit 1; }
	@out=$$($(HELM) template x $(CHART) --set flowcontrol.handSize=16 2>&1); \
		echo "$$out" | grep -q "/flowcontrol/handSize': maximum: got 16, want 15" || \
		{ echo "a hand size the API server refuses was not refused by values.schema.json: $$out"; exit 1; }
	@$(HELM) template x $(CHART) | grep -q 'image: "*$(IMAGE)"*$$' || \
		{ echo "make image tags $(IMAGE); the chart's default image (image.repository:appVersion) is another"; exit 1; }
	@out=$$($(HELM) template x $(CHART) -n ops --set prometheusRule.enabled=true --set nameOverride=agent --show-only templates/prometheusrule.yaml); \
		echo "$$out" | grep -q 'up{job="agent", namespace="ops"} == 0' && ! echo "$$out" | grep -q 'job="evictiond"\|kube_' || \
		{ echo "the PrometheusRule does not select the release's agents (job from nameOverride, namespace) or reads kube-state-metrics unasked: $$out"; exit 1; }
	@out=$$($(HELM) template x $(CHART) --set serviceAccount.create=false --set serviceAccount.name=byo --set rbac.create=false); \
		! echo "$$out" | grep -q '^kind: ServiceAccount$$\|^kind: ClusterRole' && echo "$$out" | grep -q 'serviceAccountName: byo' || \
		{ echo "serviceAccount.create=false, rbac.create=false still render them, or the pods do not use serviceAccount.name"; exit 1; }
	@out=$$($(HELM) template x $(CHART) --set host.criSocketDir=/var/run/crio); \
		echo "$$out" | grep -q '{name: cri-run, mountPath: /var/run/crio, readOnly: true}' || \
		{ echo "CRI-O's socket directory is not mounted where the agent looks for it (its host path)"; exit 1; }
	@out=$$($(HELM) template x $(CHART) --set-json 'livenessProbe={"httpGet":{"path":"/"}}' 2>&1); \
		echo "$$out" | grep -q "additional properties 'httpGet' not allowed" || \
		{ echo "a probe override replacing the chart's httpGet was not refused by values.schema.json: $$out"; exit 1; }
	@out=$$($(HELM) template x $(CHART) --set configYAML='a: [' 2>&1); \
		echo "$$out" | grep -q "configYAML: not a YAML map" || \
		{ echo "a configYAML that is not YAML was not refused by name: $$out"; exit 1; }

# The alerts (charts/evictiond/files/alerts.yaml) with Debian's promtool: syntax, then the
# unit tests of test/alerts (each alert firing and not firing).
test-alerts: daemon-packages
	promtool check rules $(CHART)/files/alerts.yaml
	promtool test rules test/alerts/alerts_test.yaml

# The dashboard's and alerts' PromQL through Prometheus' own parser, naming only exported
# metrics (tools module hack/tools/prometheus, which already requires Prometheus).
test-dashboard:
	cd hack/tools/prometheus && $(GO) test -count=1 ./checks
