package main

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestProbeExitsOnTheEndpointsAnswer(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/readyz" {
			w.Write([]byte("ok"))
			return
		}
		http.Error(w, "[-]cri failed: connection refused", http.StatusServiceUnavailable)
	}))
	defer srv.Close()
	code, stdout, _ := run("probe", "--url", srv.URL+"/readyz")
	if code != 0 || !strings.Contains(stdout, "200 OK") {
		t.Errorf("ready endpoint: exit %d, stdout %q", code, stdout)
	}
	code, stdout, _ = run("probe", "--url", srv.URL+"/other")
	if code != 1 || !strings.Contains(stdout, "503") || !strings.Contains(stdout, "cri failed") {
		t.Errorf("failing endpoint: exit %d, stdout %q", code, stdout)
	}
	srv.Close()
	if code, _, stderr := run("probe", "--url", srv.URL+"/readyz"); code != 1 || !strings.Contains(stderr, "connection refused") {
		t.Errorf("no endpoint: exit %d, stderr %q", code, stderr)
	}
}
