//go:build e2e

package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/evictiond/evictiond/internal/testenv/proc"
)

// Prometheus is a Prometheus server discovering pods through the cluster's API server, with
// the annotation-driven relabelling most clusters use (prometheus.io/scrape,
// prometheus.io/scheme, prometheus.io/port, prometheus.io/path), scraping with a
// ServiceAccount token (Cluster.ScraperToken). The binary is $EVICTIOND_PROMETHEUS (make test-e2e
// sets it to hack/prometheus.sh's build), else prometheus from PATH. Debian's package will not
// do: it is built without Kubernetes service discovery.
type Prometheus struct {
	// URL is the server's base URL on loopback.
	URL  string
	proc *proc.Process
}

// StartPrometheus starts Prometheus with a 1 s scrape interval and registers its stop.
func (c *Cluster) StartPrometheus(t testing.TB) *Prometheus {
	t.Helper()
	bin := os.Getenv("EVICTIOND_PROMETHEUS")
	if bin == "" {
		var err error
		if bin, err = exec.LookPath("prometheus"); err != nil {
			t.Fatal("no Prometheus: set EVICTIOND_PROMETHEUS to the binary hack/prometheus.sh builds (make test-e2e does)")
		}
	}
	dir := filepath.Join(c.Dir, "prometheus")
	if err := os.MkdirAll(filepath.Join(dir, "data"), 0o755); err != nil {
		t.Fatal(err)
	}
	caFile, tokenFile := filepath.Join(dir, "ca.crt"), filepath.Join(dir, "token")
	if err := os.WriteFile(caFile, c.Config.TLSClientConfig.CAData, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(tokenFile, []byte(c.Config.BearerToken), 0o600); err != nil {
		t.Fatal(err)
	}
	// Discovery with the admin token; scrapes with a ServiceAccount's, which the API server
	// authorizes for evictiond's /metrics through deploy/'s evictiond-metrics-reader.
	scrapeToken, err := c.ScraperToken(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	scrapeTokenFile := filepath.Join(dir, "scrape-token")
	if err := os.WriteFile(scrapeTokenFile, []byte(scrapeToken), 0o600); err != nil {
		t.Fatal(err)
	}
	ports, err := freePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	config := fmt.Sprintf(`global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: kubernetes-pods
    # evictiond's certificate is self-signed (generated in memory by the agent).
    tls_config: {insecure_skip_verify: true}
    authorization: {credentials_file: %[4]q}
    kubernetes_sd_configs:
      - role: pod
        api_server: %[1]q
        tls_config: {ca_file: %[2]q}
        authorization: {credentials_file: %[3]q}
    relabel_configs:
      - source_labels: [__meta_kubernetes_pod_annotation_prometheus_io_scrape]
        action: keep
        regex: "true"
      - source_labels: [__meta_kubernetes_pod_annotation_prometheus_io_scheme]
        action: replace
        target_label: __scheme__
        regex: (https?)
      - source_labels: [__meta_kubernetes_pod_annotation_prometheus_io_path]
        action: replace
        target_label: __metrics_path__
        regex: (.+)
      - source_labels: [__address__, __meta_kubernetes_pod_annotation_prometheus_io_port]
        action: replace
        regex: ([^:]+)(?::\d+)?;(\d+)
        replacement: $1:$2
        target_label: __address__
      - source_labels: [__meta_kubernetes_namespace]
        target_label: namespace
      - source_labels: [__meta_kubernetes_pod_name]
        target_label: pod
      - source_labels: [__meta_kubernetes_pod_node_name]
        target_label: node
`, c.Config.Host, caFile, tokenFile, scrapeTokenFile)
	cfgPath := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfgPath, []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	p := &Prometheus{URL: "http://127.0.0.1:" + strconv.Itoa(ports[0])}
	p.proc = &proc.Process{
		Name:    "prometheus",
		Path:    bin,
		LogPath: filepath.Join(c.Dir, "prometheus.log"),
		Args: []string{
			"--config.file=" + cfgPath,
			"--storage.tsdb.path=" + filepath.Join(dir, "data"),
			"--web.listen-address=127.0.0.1:" + strconv.Itoa(ports[0]),
			"--log.level=info",
		},
	}
	if err := p.proc.Start(); err != nil {
		t.Fatal(p.proc.Failure(err))
	}
	t.Cleanup(func() { p.proc.Stop(10 * time.Second) })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err = wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		if !p.proc.Running() {
			return false, errors.New("exited")
		}
		resp, err := http.Get(p.URL + "/-/ready")
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
	if err != nil {
		if strings.Contains(p.LogTail(5), "field kubernetes_sd_configs not found") {
			t.Fatalf("%s has no Kubernetes service discovery: Debian's prometheus package is built without it "+
				"(its discovery/ has no kubernetes); set EVICTIOND_PROMETHEUS to the binary hack/prometheus.sh builds\n%v", bin, p.proc.Failure(err))
		}
		t.Fatal(p.proc.Failure(fmt.Errorf("waiting for /-/ready: %w", err)))
	}
	return p
}

// Sample is one element of an instant query's vector result.
type Sample struct {
	Metric map[string]string
	Value  float64
}

// Query runs an instant PromQL query and returns its vector result.
func (p *Prometheus) Query(ctx context.Context, promql string) ([]Sample, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.URL+"/api/v1/query?query="+url.QueryEscape(promql), nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("query %q: %w", promql, err)
	}
	defer resp.Body.Close()
	var body struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			ResultType string `json:"resultType"`
			Result     []struct {
				Metric map[string]string `json:"metric"`
				Value  [2]any            `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return nil, fmt.Errorf("query %q: decoding the answer: %w", promql, err)
	}
	if body.Status != "success" {
		return nil, fmt.Errorf("query %q: %s", promql, body.Error)
	}
	if body.Data.ResultType != "vector" {
		return nil, fmt.Errorf("query %q: result type %s, want vector", promql, body.Data.ResultType)
	}
	var out []Sample
	for _, r := range body.Data.Result {
		s, _ := r.Value[1].(string)
		v, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return nil, fmt.Errorf("query %q: value %v: %w", promql, r.Value[1], err)
		}
		out = append(out, Sample{Metric: r.Metric, Value: v})
	}
	return out, nil
}

// LogTail returns the last n lines of Prometheus' log.
func (p *Prometheus) LogTail(n int) string { return proc.Tail(p.proc.LogPath, n) }
