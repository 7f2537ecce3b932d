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
