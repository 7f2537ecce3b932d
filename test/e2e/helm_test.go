//go:build e2e

package e2e_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/evictiond/evictiond/test/e2e/cluster"
)

// TestHelmInstall boots its own cluster and installs evictiond the way the docs say, with the
// commands read from README.md and docs/install.md (install_docs_test.go): the image loaded
// with ctr, the namespace and its Pod Security label, `helm install --wait` of charts/evictiond
// (Helm from hack/helm.sh, $EVICTIOND_HELM), then the documented check (`helm test`: the
// chart's probe of the agent's /readyz from a pod beside it). Then the
// memory episode of scenario 1 and the disk episode of scenario 3 run against it unchanged;
// afterwards every panel of the Grafana dashboard (charts/evictiond/files/dashboard.json) shows
// data in a real Prometheus that discovered the agent by its pod annotations, and every rule of
// the chart's PrometheusRule evaluates against it and selects the agent; the documented `helm
// upgrade -f my-values.yaml` (dryRun: true) rolls the pod to one running --dry-run; finally
// the documented `helm uninstall` and clean-up leave no DaemonSet, ConfigMap, taint or
// condition of evictiond's.
func TestHelmInstall(t *testing.T) {
	helm := os.Getenv("EVICTIOND_HELM")
	if helm == "" {
		t.Fatal("EVICTIOND_HELM is not set: run through make test-e2e (it builds Helm with hack/helm.sh)")
	}
	doc := readDocumentedInstall(t)
	c := cluster.Start(t, cluster.Options{AuditLog: true})
	ctx := context.Background()
	sh, took := installAsDocumented(t, c, helm, doc)
	t.Logf("the documented install (image loaded, namespace, helm install --wait) took %s to a Ready agent", took.Round(time.Millisecond))
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("--- last lines of evictiond ---\n%s", c.EvictiondLogTail(60))
		}
	})
	if out, err := c.Helm(ctx, helm, "status", cluster.HelmRelease, "--namespace", cluster.EvictiondNamespace); err != nil ||
		!strings.Contains(string(out), "STATUS: deployed") {
		t.Fatalf("helm status: %v\n%s", err, out)
	}

	// The documented check: helm test (templates/tests: a pod beside the agent asks its
	// /readyz) and the DaemonSet's rollout status.
	t.Run("HelmTest", func(t *testing.T) { sh.mustRun(t, doc.check...) })
	t.Run("MemoryHogEvictedBeforeOOMKill", func(t *testing.T) { testMemoryHogEvictedBeforeOOMKill(t, c) })
	t.Run("DiskPressure", func(t *testing.T) { testDiskPressure(t, c) })
	t.Run("DashboardPanelsHaveData", func(t *testing.T) { testDashboardPanelsHaveData(t, c) })
	t.Run("AlertRulesSelectTheAgents", func(t *testing.T) { testAlertRulesSelectTheAgents(t, c, helm) })
	t.Run("UpgradeToDryRun", func(t *testing.T) {
		before, err := c.EvictiondPod(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(sh.dir, "my-values.yaml"), []byte("dryRun: true\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		sh.mustRun(t, doc.upgrade...)
		// The DaemonSet rolls its pod: wait for a Ready pod other than the one before.
		var after string
		err = wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
			pod, err := c.WaitEvictiondReady(ctx, 5*time.Second)
			if err != nil || pod.UID == before.UID {
				return false, nil
			}
			after = strings.Join(pod.Spec.Containers[0].Args, " ")
			return true, nil
		})
		if err != nil {
			t.Fatalf("no new Ready evictiond pod after helm upgrade (the one before: %s)", before.Name)
		}
		if !strings.Contains(after, "--dry-run") {
			t.Errorf("the upgraded pod's args %q lack --dry-run", after)
		}
		if out, err := c.Helm(ctx, helm, "history", cluster.HelmRelease, "--namespace", cluster.EvictiondNamespace); err != nil ||
			!strings.Contains(string(out), "Upgrade complete") {
			t.Errorf("helm history after the upgrade: %v\n%s", err, out)
		}
	})
	t.Run("Uninstall", func(t *testing.T) {
		uninstallAsDocumented(t, c, sh, doc)
		if _, err := c.Client.CoreV1().ConfigMaps(cluster.EvictiondNamespace).Get(ctx, cluster.EvictiondConfigMap, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("after the documented uninstall the ConfigMap %s is still there (%v)", cluster.EvictiondConfigMap, err)
		}
	})
}

// grafanaVars are the values Grafana puts in the dashboard's queries with every node and
// signal selected, at this Prometheus' 1 s scrape interval.
var grafanaVars = strings.NewReplacer("$__rate_interval", "1m", "$__interval", "15s", "$node", ".*", "$signal", ".*")

// testDashboardPanelsHaveData: after the pressure episodes, every panel of the dashboard has
// at least one query that returns series (a panel whose queries all return nothing would
// show "No data"); queries without series are logged (e.g. read errors that never happened).
func testDashboardPanelsHaveData(t *testing.T, c *cluster.Cluster) {
	ctx := context.Background()
	data, err := os.ReadFile(filepath.Join("..", "..", "charts", "evictiond", "files", "dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	type panel struct {
		Type    string `json:"type"`
		Title   string `json:"title"`
		Targets []struct {
			Expr  string `json:"expr"`
			RefID string `json:"refId"`
		} `json:"targets"`
	}
	var dash struct {
		Panels []panel `json:"panels"`
	}
	if err := json.Unmarshal(data, &dash); err != nil {
		t.Fatalf("dashboard.json: %v", err)
	}
	prom := c.StartPrometheus(t)
	checked := 0
	for _, p := range dash.Panels {
		if p.Type == "row" {
			continue
		}
		checked++
		var empty []string
		// Rates need two scrapes in their window: poll until the panel has data.
		err := wait.PollUntilContextTimeout(ctx, time.Second, 45*time.Second, true, func(ctx context.Context) (bool, error) {
			empty = empty[:0]
			has := false
			for _, target := range p.Targets {
				samples, err := prom.Query(ctx, grafanaVars.Replace(target.Expr))
				if err != nil {
					empty = append(empty, target.RefID+": "+err.Error())
					continue
				}
				if len(samples) == 0 {
					empty = append(empty, target.RefID)
					continue
				}
				has = true
			}
			return has, nil
		})
		if err != nil {
			t.Errorf("panel %q: no query returned data after 45s (without data: %v)\n--- prometheus ---\n%s", p.Title, empty, prom.LogTail(10))
			continue
		}
		if len(empty) > 0 {
			t.Logf("panel %q has data; queries without series: %v", p.Title, empty)
		}
	}
	if checked < 10 {
		t.Fatalf("only %d panels read from dashboard.json", checked)
	}
}
