package daemon

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/evictiond/evictiond/internal/agent"
)

// /readyz names every failing check and answers 503; /healthz with its checks
// passing answers 200.
func TestHandlerServesTheChecks(t *testing.T) {
	ok := agent.Check{Name: "loop", Fn: func(context.Context) error { return nil }}
	down := agent.Check{Name: "cri", Fn: func(context.Context) error { return errors.New("connection refused") }}
	srv := httptest.NewServer(Handler(prometheus.NewRegistry(), []agent.Check{ok}, []agent.Check{ok, down}))
	defer srv.Close()
	get := func(path string) (int, string) {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get("/healthz"); code != http.StatusOK || !strings.Contains(body, "[+] loop ok") {
		t.Errorf("/healthz: %d %q", code, body)
	}
	if code, body := get("/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "[-] cri: connection refused") || !strings.Contains(body, "failed: cri") {
		t.Errorf("/readyz: %d %q", code, body)
	}
}

// /metrics answers uncompressed even to a scraper that accepts gzip (Prometheus does): a gzip
// writer would cost the idle agent about 800 KB of heap per scrape (Handler).
func TestMetricsAreNotCompressed(t *testing.T) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(prometheus.NewCounter(prometheus.CounterOpts{Name: "evictiond_test_total", Help: "A counter."}))
	srv := httptest.NewServer(Handler(reg, nil, nil))
	defer srv.Close()
	req, err := http.NewRequest(http.MethodGet, srv.URL+"/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept-Encoding", "gzip")
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if enc := resp.Header.Get("Content-Encoding"); enc != "" || !strings.Contains(string(body), "evictiond_test_total 0") {
		t.Errorf("/metrics with Accept-Encoding gzip: Content-Encoding %q, body %q; want the text uncompressed", enc, body)
	}
}
