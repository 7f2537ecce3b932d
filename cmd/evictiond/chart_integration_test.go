//go:build integration

package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/evictiond/evictiond/internal/policy"
)

// The Prometheus Operator CRDs the chart's optional objects need.
var chartCRDs = []string{"servicemonitors", "podmonitors", "prometheusrules"}

// TestDeployChartAcceptedByAPIServer renders charts/evictiond with its default values and
// with each test/chart/values-*.yaml (`helm template`, Helm from hack/helm.sh) and runs
// `kubectl apply --dry-run=server` on the result against the real API server, with the
// Prometheus Operator's CRDs installed (hack/prometheus-operator-crds.sh): every object,
// ServiceMonitor, PodMonitor and PrometheusRule included, passes the server's validation
// (the CRDs' OpenAPI schemas) and admission. Every rendered EvictionConfiguration (one per
// pool) passes evictiond's own validation.
func TestDeployChartAcceptedByAPIServer(t *testing.T) {
	helm := os.Getenv("EVICTIOND_HELM")
	if helm == "" {
		t.Fatal("EVICTIOND_HELM is not set: run through make test-daemon (it builds Helm with hack/helm.sh)")
	}
	crdDir := os.Getenv("EVICTIOND_PROMETHEUS_OPERATOR_CRDS")
	if crdDir == "" {
		t.Fatal("EVICTIOND_PROMETHEUS_OPERATOR_CRDS is not set: run through make test-daemon (hack/prometheus-operator-crds.sh)")
	}
	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		t.Fatal("kubectl not found in PATH: install it (Debian package kubernetes-client)")
	}
	ctx := context.Background()
	for _, crd := range chartCRDs {
		path := filepath.Join(crdDir, "monitoring.coreos.com_"+crd+".yaml")
		// Server-side apply: the CRDs are too large for the last-applied annotation.
		if out, err := exec.Command(kubectl, "--kubeconfig", env.KubeconfigPath, "apply", "--server-side", "-f", path).CombinedOutput(); err != nil {
			t.Fatalf("installing CRD %s: %v\n%s", path, err, out)
		}
	}
	args := []string{"--kubeconfig", env.KubeconfigPath, "wait", "--for=condition=Established", "--timeout=60s"}
	for _, crd := range chartCRDs {
		args = append(args, "crd/"+crd+".monitoring.coreos.com")
	}
	if out, err := exec.Command(kubectl, args...).CombinedOutput(); err != nil {
		t.Fatalf("waiting for the Prometheus Operator CRDs: %v\n%s", err, out)
	}

	chart := filepath.Join("..", "..", "charts", "evictiond")
	cases := []struct {
		values string
		// objects the dry run must name (kind/name as kubectl prints them)
		want []string
	}{
		{"", []string{"daemonset.apps/evictiond", "configmap/evictiond-config", "serviceaccount/evictiond",
			"clusterrole.rbac.authorization.k8s.io/evictiond", "validatingadmissionpolicy.admissionregistration.k8s.io/evictiond-own-node-only",
			"clusterrole.rbac.authorization.k8s.io/evictiond-metrics-reader",
			"flowschema.flowcontrol.apiserver.k8s.io/evictiond", "prioritylevelconfiguration.flowcontrol.apiserver.k8s.io/evictiond",
			"validatingwebhookconfiguration.admissionregistration.k8s.io/evictiond-own-node-evictions", "deployment.apps/evictiond-webhook",
			"service/evictiond-webhook", "role.rbac.authorization.k8s.io/evictiond-webhook"}},
		{"values-full.yaml", []string{"daemonset.apps/agent", "daemonset.apps/agent-gpu", "daemonset.apps/agent-small",
			"configmap/agent-gpu-config", "configmap/agent-small-config", "configmap/agent-dashboard", "service/agent-metrics",
			"servicemonitor.monitoring.coreos.com/agent", "podmonitor.monitoring.coreos.com/agent",
			"prometheusrule.monitoring.coreos.com/agent", "validatingadmissionpolicybinding.admissionregistration.k8s.io/agent-own-node-only",
			"clusterrole.rbac.authorization.k8s.io/agent-metrics-reader", "flowschema.flowcontrol.apiserver.k8s.io/agent"}},
		{"values-minimal.yaml", []string{"daemonset.apps/evictiond-workers", "configmap/evictiond-workers-config",
			"podmonitor.monitoring.coreos.com/evictiond"}},
	}
	for _, c := range cases {
		name := c.values
		if name == "" {
			name = "defaults"
		}
		t.Run(name, func(t *testing.T) {
			ns := "chart-" + strings.TrimSuffix(strings.TrimPrefix(name, "values-"), ".yaml")
			if _, err := env.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
				t.Fatalf("creating namespace %s: %v", ns, err)
			}
			args := []string{"template", "evictiond", chart, "--namespace", ns}
			if c.values != "" {
				args = append(args, "-f", filepath.Join("..", "..", "test", "chart", c.values))
			}
			rendered, err := exec.Command(helm, args...).Output()
			if err != nil {
				t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, stderrOf(err))
			}
			apply := exec.Command(kubectl, "--kubeconfig", env.KubeconfigPath, "apply", "--dry-run=server", "-f", "-")
			apply.Stdin = bytes.NewReader(rendered)
			out, err := apply.CombinedOutput()
			if err != nil {
				t.Fatalf("kubectl apply --dry-run=server of helm %s: %v\n%s", strings.Join(args, " "), err, out)
			}
			t.Logf("%s", out)
			for _, obj := range c.want {
				if !bytes.Contains(out, []byte(obj+" created (server dry run)")) {
					t.Errorf("kubectl output does not name %s created (server dry run)", obj)
				}
			}
			configs := renderedConfigs(t, rendered)
			if len(configs) == 0 {
				t.Fatal("no evictiond ConfigMap with config.yaml in the render")
			}
			for cm, data := range configs {
				if _, errs := policy.Load([]byte(data)); errs != nil {
					t.Errorf("ConfigMap %s: config.yaml is refused by evictiond: %v\n%s", cm, errs, data)
				}
			}
		})
	}
}

// renderedConfigs returns config.yaml of every ConfigMap labelled with a pool.
func renderedConfigs(t *testing.T, manifests []byte) map[string]string {
	t.Helper()
	out := map[string]string{}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(manifests), 4096)
	for {
		var obj unstructured.Unstructured
		if err := dec.Decode(&obj.Object); err != nil {
			if errors.Is(err, io.EOF) {
				return out
			}
			t.Fatalf("decoding the render: %v", err)
		}
		if obj.GetKind() != "ConfigMap" || obj.GetLabels()["evictiond.io/pool"] == "" {
			continue
		}
		data, _, _ := unstructured.NestedString(obj.Object, "data", "config.yaml")
		out[obj.GetName()] = data
	}
}

func stderrOf(err error) string {
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return string(exit.Stderr)
	}
	return fmt.Sprint(err)
}
