package checks

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
	"sigs.k8s.io/yaml"
)

const repo = "../../../.."

// grafanaVars are the values Grafana substitutes for the dashboard's variables, as the
// queries reach Prometheus with "All" selected.
var grafanaVars = strings.NewReplacer("$__rate_interval", "5m", "$__interval", "1m", "$node", ".*", "$signal", ".*")

// promql is Prometheus' parser with its default options (the functions a stock server has).
var promql = parser.NewParser(parser.Options{})

// family is a metric family of docs/metrics.md's table.
type family struct{ name, typ string }

// exportedFamilies reads the families docs/metrics.md's table names exactly (wildcard rows
// such as evictiond_monitor_* are not exact names and are left out).
func exportedFamilies(t *testing.T) map[string]family {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repo, "docs", "metrics.md"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]family{}
	for _, m := range regexp.MustCompile("(?m)^\\| `(evictiond_[a-z_]+)` \\| ([a-z]*) \\|").FindAllStringSubmatch(string(data), -1) {
		out[m[1]] = family{m[1], m[2]}
	}
	if len(out) < 15 {
		t.Fatalf("docs/metrics.md: only %d metric families parsed from its table", len(out))
	}
	return out
}

// metricNames returns the metric names an expression selects.
func metricNames(expr parser.Expr) []string {
	var names []string
	parser.Inspect(expr, func(node parser.Node, _ []parser.Node) error {
		vs, ok := node.(*parser.VectorSelector)
		if !ok {
			return nil
		}
		name := vs.Name
		for _, m := range vs.LabelMatchers {
			if m.Name == labels.MetricName && m.Type == labels.MatchEqual {
				name = m.Value
			}
		}
		names = append(names, name)
		return nil
	})
	return names
}

// checkExported reports a metric name that evictiond does not export: a histogram's
// _bucket, _sum and _count series belong to its family.
func checkExported(name string, families map[string]family, others map[string]bool) error {
	if others[name] {
		return nil
	}
	if _, ok := families[name]; ok {
		return nil
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if f, ok := families[strings.TrimSuffix(name, suffix)]; ok && strings.HasSuffix(name, suffix) && f.typ == "histogram" {
			return nil
		}
	}
	return fmt.Errorf("metric %q is not exported by evictiond (docs/metrics.md's table)", name)
}

type dashboard struct {
	UID        string  `json:"uid"`
	Panels     []panel `json:"panels"`
	Templating struct {
		List []struct {
			Name       string `json:"name"`
			Type       string `json:"type"`
			Definition string `json:"definition"`
		} `json:"list"`
	} `json:"templating"`
}

type panel struct {
	ID         int    `json:"id"`
	Type       string `json:"type"`
	Title      string `json:"title"`
	Datasource *struct {
		UID string `json:"uid"`
	} `json:"datasource"`
	Targets []struct {
		Expr  string `json:"expr"`
		RefID string `json:"refId"`
	} `json:"targets"`
	Panels []panel `json:"panels"`
}

func loadDashboard(t *testing.T) dashboard {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repo, "charts", "evictiond", "files", "dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatalf("charts/evictiond/files/dashboard.json: %v", err)
	}
	return d
}

func flatten(ps []panel) []panel {
	var out []panel
	for _, p := range ps {
		out = append(out, p)
		out = append(out, flatten(p.Panels)...)
	}
	return out
}

// TestDashboardQueries: every panel (rows aside) has queries; each parses with Prometheus'
// parser once Grafana's variables are substituted, and selects only evictiond's metrics.
func TestDashboardQueries(t *testing.T) {
	families := exportedFamilies(t)
	d := loadDashboard(t)
	if d.UID == "" {
		t.Error("dashboard has no uid: the Grafana sidecar would import a new copy on every change")
	}
	ids := map[int]string{}
	queries := 0
	used := map[string]bool{}
	for _, p := range flatten(d.Panels) {
		if prev, dup := ids[p.ID]; dup {
			t.Errorf("panel %q: id %d already used by %q", p.Title, p.ID, prev)
		}
		ids[p.ID] = p.Title
		if p.Type == "row" {
			continue
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		if p.Datasource == nil || p.Datasource.UID != "${datasource}" {
			t.Errorf("panel %q: datasource must be the ${datasource} variable", p.Title)
		}
		refs := map[string]bool{}
		for _, target := range p.Targets {
			queries++
			if refs[target.RefID] || target.RefID == "" {
				t.Errorf("panel %q: refId %q empty or used twice", p.Title, target.RefID)
			}
			refs[target.RefID] = true
			expr, err := promql.ParseExpr(grafanaVars.Replace(target.Expr))
			if err != nil {
				t.Errorf("panel %q, query %s: %v\n%s", p.Title, target.RefID, err, target.Expr)
				continue
			}
			for _, name := range metricNames(expr) {
				used[name] = true
				if err := checkExported(name, families, nil); err != nil {
					t.Errorf("panel %q, query %s: %v", p.Title, target.RefID, err)
				}
			}
		}
	}
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		m := regexp.MustCompile(`^label_values\((evictiond_[a-z_]+), *[a-z_]+\)$`).FindStringSubmatch(v.Definition)
		if m == nil {
			t.Errorf("variable %s: definition %q is not label_values(<evictiond metric>, <label>)", v.Name, v.Definition)
			continue
		}
		if err := checkExported(m[1], families, nil); err != nil {
			t.Errorf("variable %s: %v", v.Name, err)
		}
	}
	if queries < 10 {
		t.Fatalf("only %d queries found in the dashboard: it was not read", queries)
	}
	names := make([]string, 0, len(used))
	for n := range used {
		names = append(names, n)
	}
	sort.Strings(names)
	t.Logf("%d panels' %d queries parse and select %v", len(ids), queries, names)
}

// TestAlertExpressions: every rule of files/alerts.yaml parses and selects only evictiond's
// metrics, or the few it documents reading from elsewhere (up, kube-state-metrics); each
// selector is scoped by a job matcher (the chart replaces it, so another scrape job or a
// nameOverride does not disable the rule); each alert has promtool tests
// (test/alerts/alerts_test.yaml) and a runbook section (docs/alerts.md).
func TestAlertExpressions(t *testing.T) {
	families := exportedFamilies(t)
	others := map[string]bool{"up": true, "kube_pod_status_ready": true, "kube_pod_info": true,
		"kube_daemonset_status_desired_number_scheduled": true}
	tests, err := os.ReadFile(filepath.Join(repo, "test", "alerts", "alerts_test.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	runbook, err := os.ReadFile(filepath.Join(repo, "docs", "alerts.md"))
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(repo, "charts", "evictiond", "files", "alerts.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert string `json:"alert"`
				Expr  string `json:"expr"`
			} `json:"rules"`
		} `json:"groups"`
	}
	if err := yaml.Unmarshal(data, &rules); err != nil {
		t.Fatalf("charts/evictiond/files/alerts.yaml: %v", err)
	}
	n := 0
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			n++
			expr, err := promql.ParseExpr(r.Expr)
			if err != nil {
				t.Errorf("alert %s: %v", r.Alert, err)
				continue
			}
			for _, name := range metricNames(expr) {
				if err := checkExported(name, families, others); err != nil {
					t.Errorf("alert %s: %v", r.Alert, err)
				}
			}
			parser.Inspect(expr, func(node parser.Node, _ []parser.Node) error {
				if vs, ok := node.(*parser.VectorSelector); ok && !hasJobMatcher(vs) {
					t.Errorf("alert %s: %s has no job matcher (job=\"evictiond\" or job=\"kube-state-metrics\")", r.Alert, vs)
				}
				return nil
			})
			if !strings.Contains(string(tests), "alertname: "+r.Alert+"\n") {
				t.Errorf("alert %s has no promtool test in test/alerts/alerts_test.yaml", r.Alert)
			}
			if !strings.Contains(string(runbook), "\n## "+r.Alert+"\n") {
				t.Errorf("alert %s has no section in docs/alerts.md", r.Alert)
			}
		}
	}
	if n < 7 {
		t.Fatalf("only %d rules found in alerts.yaml", n)
	}
}

func hasJobMatcher(vs *parser.VectorSelector) bool {
	for _, m := range vs.LabelMatchers {
		if m.Name == "job" && m.Type == labels.MatchEqual && (m.Value == "evictiond" || m.Value == "kube-state-metrics") {
			return true
		}
	}
	return false
}
