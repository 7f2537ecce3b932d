package kube

import (
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"k8s.io/client-go/rest"
)

// The groups Client serves answer through one shared token bucket and user agent,
// as kubernetes.NewForConfig's do.
func TestClientServesTheAgentsGroupsThroughOneTransport(t *testing.T) {
	var agents []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		agents = append(agents, r.Header.Get("User-Agent"))
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"kind":"Status","apiVersion":"v1","status":"Success"}`))
	}))
	defer srv.Close()
	c, err := NewClient(&rest.Config{Host: srv.URL, QPS: 5, Burst: 10, UserAgent: "evictiond"})
	if err != nil {
		t.Fatal(err)
	}
	limiter := c.CoreV1().RESTClient().GetRateLimiter()
	if limiter == nil {
		t.Fatal("core/v1: no rate limiter with QPS 5")
	}
	for name, rc := range map[string]rest.Interface{
		"policy/v1": c.PolicyV1().RESTClient(), "authentication/v1": c.AuthenticationV1().RESTClient(),
		"authorization/v1": c.AuthorizationV1().RESTClient(), "discovery": c.Discovery().RESTClient(),
	} {
		if rc.GetRateLimiter() != limiter {
			t.Errorf("%s: a token bucket of its own; want core/v1's, shared as kubernetes.NewForConfig shares it", name)
		}
	}
	if err := c.Discovery().RESTClient().Get().AbsPath("/readyz").Do(t.Context()).Error(); err != nil {
		t.Fatal(err)
	}
	if len(agents) != 1 || agents[0] != "evictiond" {
		t.Errorf("user agents %q, want [evictiond]", agents)
	}
	if _, err := NewClient(&rest.Config{Host: srv.URL, QPS: 5}); err == nil {
		t.Error("QPS without burst: no error")
	}
}

// Client panics on a group it does not build: every group the agent's code calls
// must be one of its own.
func TestAgentCallsOnlyTheGroupsClientServes(t *testing.T) {
	served := map[string]bool{"CoreV1": true, "PolicyV1": true, "AuthenticationV1": true, "AuthorizationV1": true}
	call := regexp.MustCompile(`\.([A-Z][A-Za-z]*V[0-9]+(?:alpha[0-9]+|beta[0-9]+)?)\(\)`)
	root := filepath.Join("..", "..")
	for _, dir := range []string{"cmd", "internal"} {
		err := filepath.WalkDir(filepath.Join(root, dir), func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") ||
				strings.Contains(path, filepath.Join("internal", "testenv")) {
				return err
			}
			src, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			for _, m := range call.FindAllStringSubmatch(string(src), -1) {
				if !served[m[1]] {
					t.Errorf("%s calls %s(): add the group to kube.Client (internal/kube/client.go)", path, m[1])
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}
