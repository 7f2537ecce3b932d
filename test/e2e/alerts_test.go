//go:build e2e

package e2e_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/yaml"

	"github.com/evictiond/evictiond/test/e2e/cluster"
)

// e2eScrapeSelector is what the e2e Prometheus' annotation-driven scrape gives the agents'
// series: its job is not the chart's, which is what prometheusRule.selector is for.
const e2eScrapeSelector = `job="kubernetes-pods", namespace="evictiond-system"`

// healthyQuiet are the rules that must not fire on a healthy install: if their selectors
// missed the agents, EvictiondAbsent would.
var healthyQuiet = []string{"EvictiondDown", "EvictiondAbsent", "EvictiondLoopStalled"}

// testAlertRulesSelectTheAgents renders the chart's PrometheusRule with the selector this
// Prometheus' scrape needs and runs every rule's expression against it: each is evaluated
// without error; each gauge it reads has series under the rule's selector (a counter or a
// histogram appears with its first event and may have none yet: logged); the rules that say
// the agents are gone or stalled return nothing.
func testAlertRulesSelectTheAgents(t *testing.T, c *cluster.Cluster, helm string) {
	ctx := context.Background()
	values := filepath.Join(t.TempDir(), "values.yaml")
	data, err := yaml.Marshal(map[string]any{"prometheusRule": map[string]any{"enabled": true, "selector": e2eScrapeSelector}})
	if err == nil {
		err = os.WriteFile(values, data, 0o644)
	}
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(helm, "template", cluster.HelmRelease, filepath.Join("..", "..", "charts", "evictiond"),
		"--namespace", cluster.EvictiondNamespace, "-f", values, "--show-only", "templates/prometheusrule.yaml").CombinedOutput()
	if err != nil {
		t.Fatalf("helm template the PrometheusRule: %v\n%s", err, out)
	}
	var rule struct {
		Spec struct {
			Groups []struct {
				Rules []struct{ Alert, Expr string }
			}
		}
	}
	if err := yaml.Unmarshal(out, &rule); err != nil {
		t.Fatalf("the rendered PrometheusRule: %v\n%s", err, out)
	}
	start := time.Now()
	prom := c.StartPrometheus(t)
	// Up to 20 s for the first scrapes of a fresh Prometheus.
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 20*time.Second, true, func(ctx context.Context) (bool, error) {
		s, err := prom.Query(ctx, "up{"+e2eScrapeSelector+"} == 1")
		return err == nil && len(s) > 0, nil
	}); err != nil {
		t.Fatalf("no agent scraped under %s\n--- prometheus ---\n%s", e2eScrapeSelector, prom.LogTail(10))
	}
	// The TSDB directory is the dashboard check's: the agent may be up from its scrapes already.
	t.Logf("the agent up in Prometheus %s after its start", time.Since(start).Round(time.Millisecond))
	metric := regexp.MustCompile(`\b([a-z_]+)\{`)
	n := 0
	for _, g := range rule.Spec.Groups {
		for _, r := range g.Rules {
			n++
			if !strings.Contains(r.Expr, e2eScrapeSelector) {
				t.Errorf("%s: the rendered expression lacks the selector %s:\n%s", r.Alert, e2eScrapeSelector, r.Expr)
			}
			firing, err := prom.Query(ctx, r.Expr)
			if err != nil {
				t.Errorf("%s: %v", r.Alert, err)
				continue
			}
			for _, quiet := range healthyQuiet {
				if r.Alert == quiet && len(firing) > 0 {
					t.Errorf("%s fires on a healthy install: %v", r.Alert, firing)
				}
			}
			for _, m := range metric.FindAllStringSubmatch(r.Expr, -1) {
				name := m[1]
				s, err := prom.Query(ctx, "count("+name+"{"+e2eScrapeSelector+"})")
				switch {
				case err != nil:
					t.Errorf("%s: %v", r.Alert, err)
				case len(s) > 0:
				case strings.HasSuffix(name, "_total") || strings.HasSuffix(name, "_bucket"):
					t.Logf("%s: %s has no series yet (it appears with its first event)", r.Alert, name)
				default:
					t.Errorf("%s: %s{%s} selects nothing in a live scrape of the agent", r.Alert, name, e2eScrapeSelector)
				}
			}
		}
	}
	if n < 10 {
		t.Fatalf("only %d rules rendered", n)
	}
	t.Logf("%d rules evaluated against the live Prometheus", n)
}
