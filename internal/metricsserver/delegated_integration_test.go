//go:build integration

package metricsserver

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/evictiond/evictiond/internal/kube"
	"github.com/evictiond/evictiond/internal/testenv/apiserver"
)

var env *apiserver.Env

const agentNamespace = "evictiond-system"

func TestMain(m *testing.M) {
	var err error
	env, err = apiserver.Start(apiserver.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, "starting the API server environment:", err)
		os.Exit(1)
	}
	code := func() int {
		_, file, _, _ := runtime.Caller(0)
		for _, manifest := range []string{"namespace.yaml", "rbac.yaml"} {
			if err := env.ApplyFile(context.Background(), filepath.Join(filepath.Dir(file), "..", "..", "deploy", manifest)); err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 1
			}
		}
		return m.Run()
	}()
	env.Stop()
	os.Exit(code)
}

// The shipped RBAC against a real API server: the agent's ServiceAccount may ask for
// TokenReviews and SubjectAccessReviews; a caller without a token, with a token the API
// server does not know, or with a token whose user may not get /metrics is refused; a
// ServiceAccount bound to the shipped evictiond-metrics-reader ClusterRole scrapes.
func TestMetricsNeedATokenTheAPIServerAuthorizes(t *testing.T) {
	ctx := context.Background()
	agentCfg, err := env.ServiceAccountConfig(ctx, agentNamespace, "evictiond", nil)
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(prometheus.NewGauge(prometheus.GaugeOpts{Name: "evictiond_test_up", Help: "A metric the test looks for."}))
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") })
	srvCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	agent, err := kube.NewClient(agentCfg)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := Start(srvCtx, Options{
		Flags:   Flags{MetricsAddress: "127.0.0.1:0", HealthAddress: "localhost:0", Secure: true},
		Client:  agent,
		Host:    "node-a",
		Handler: mux,
		Log:     slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug})),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown(ctx)

	scraper := serviceAccountToken(t, "scraper")
	stranger := serviceAccountToken(t, "stranger")
	if _, err := env.Client.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "scraper-reads-evictiond-metrics"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "evictiond-metrics-reader"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: agentNamespace, Name: "scraper"}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The API server's RBAC cache learns the binding asynchronously; the agent caches a
	// denial for 30 s, so ask the API server first.
	waitAllowed(t, "system:serviceaccount:"+agentNamespace+":scraper")

	url := "https://" + srv.MetricsAddr.String() + "/metrics"
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	for _, tc := range []struct {
		who, token string
		want       int
		wantBody   string
	}{
		{"anonymous", "", http.StatusUnauthorized, "Unauthorized"},
		{"a token the API server does not know", "not-a-token", http.StatusUnauthorized, "Unauthorized"},
		{"a ServiceAccount without the ClusterRole", stranger, http.StatusForbidden, "user=system:serviceaccount:evictiond-system:stranger, verb=get, path=/metrics"},
		{"a ServiceAccount bound to evictiond-metrics-reader", scraper, http.StatusOK, "evictiond_test_up 0"},
	} {
		code, body := get(t, client, url, tc.token)
		if code != tc.want || !strings.Contains(body, tc.wantBody) {
			t.Errorf("%s: HTTP %d %q, want %d containing %q", tc.who, code, body, tc.want, tc.wantBody)
		}
	}
	if code, body := get(t, http.DefaultClient, "http://"+srv.MetricsAddr.String()+"/metrics", scraper); code != http.StatusBadRequest {
		t.Errorf("plain HTTP to the HTTPS port: %d %q, want 400", code, body)
	}
	if code, body := get(t, http.DefaultClient, "http://"+srv.HealthAddr.String()+"/healthz", ""); code != http.StatusOK {
		t.Errorf("/healthz without a token (the kubelet's probe): %d %q, want 200", code, body)
	}
	if code, _ := get(t, http.DefaultClient, "http://"+srv.HealthAddr.String()+"/metrics", ""); code != http.StatusNotFound {
		t.Errorf("/metrics on the plain health port: %d, want 404", code)
	}
}

func serviceAccountToken(t *testing.T, name string) string {
	t.Helper()
	ctx := context.Background()
	if _, err := env.Client.CoreV1().ServiceAccounts(agentNamespace).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cfg, err := env.ServiceAccountConfig(ctx, agentNamespace, name, nil)
	if err != nil {
		t.Fatal(err)
	}
	return cfg.BearerToken
}

func waitAllowed(t *testing.T, user string) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		sar, err := env.Client.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User: user, Groups: []string{"system:serviceaccounts", "system:authenticated"},
			NonResourceAttributes: &authorizationv1.NonResourceAttributes{Path: "/metrics", Verb: "get"},
		}}, metav1.CreateOptions{})
		return err == nil && sar.Status.Allowed, nil
	})
	if err != nil {
		t.Fatalf("%s not allowed get /metrics within 30 s of the binding: %v", user, err)
	}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
