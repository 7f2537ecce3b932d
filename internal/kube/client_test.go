package kube

import (
	"net/http"
	"net/http/httptest"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
)

// request is what a fake API server saw of one request: method, path, user agent,
// Accept and Content-Type.
type request struct{ method, path, agent, accept, body string }

// Protobuf for the built-in resources, as client-go's generated clients ask for them;
// JSON elsewhere.
const protobuf, jsonAccept = "application/vnd.kubernetes.protobuf,application/json", "application/json"

// recordRequests is an API server answering every request with a Status, and the
// requests it saw.
func recordRequests(t *testing.T) (*httptest.Server, *[]request) {
	var got []request
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		path := r.URL.Path
		if r.URL.RawQuery != "" {
			path += "?" + r.URL.RawQuery
		}
		got = append(got, request{r.Method, path, r.Header.Get("User-Agent"), r.Header.Get("Accept"), r.Header.Get("Content-Type")})
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"kind":"Status","apiVersion":"v1","status":"Success"}`))
	}))
	t.Cleanup(srv.Close)
	return srv, &got
}

func sameRequests(t *testing.T, got, want []request) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("requests %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("request %d: %v, want %v", i, got[i], want[i])
		}
	}
}

// The groups Client serves answer through one shared token bucket and user agent,
// as kubernetes.NewForConfig's do, each at its own path.
func TestClientServesTheAgentsGroupsThroughOneTransport(t *testing.T) {
	srv, got := recordRequests(t)
	c, err := NewClient(&rest.Config{Host: srv.URL, QPS: 5, Burst: 10, UserAgent: "evictiond"})
	if err != nil {
		t.Fatal(err)
	}
	limiter := c.core.GetRateLimiter()
	if limiter == nil {
		t.Fatal("core/v1: no rate limiter with QPS 5")
	}
	for name, rc := range map[string]*rest.RESTClient{
		"policy/v1": c.policy, "authentication/v1": c.authentication, "authorization/v1": c.authorization,
	} {
		if rc.GetRateLimiter() != limiter {
			t.Errorf("%s: a token bucket of its own; want core/v1's, shared as kubernetes.NewForConfig shares it", name)
		}
	}
	ctx := t.Context()
	if err := c.RESTClient().Get().AbsPath("/readyz").Do(ctx).Error(); err != nil {
		t.Fatal(err)
	}
	_, _ = c.CoreV1().Pods("ns").List(ctx, metav1.ListOptions{})
	_, _ = c.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{})
	_ = c.PolicyV1().Evictions("ns").Evict(ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p"}})
	_, _ = c.AuthenticationV1().TokenReviews().Create(ctx, &authenticationv1.TokenReview{}, metav1.CreateOptions{})
	_, _ = c.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{}, metav1.CreateOptions{})
	// The eviction goes as JSON, as client-go's EvictionExpansion sends it.
	want := []request{
		{"GET", "/readyz", "evictiond", jsonAccept + ", */*", ""},
		{"GET", "/api/v1/namespaces/ns/pods", "evictiond", protobuf, ""},
		{"GET", "/api/v1/nodes/n1", "evictiond", protobuf, ""},
		{"POST", "/api/v1/namespaces/ns/pods/p/eviction", "evictiond", jsonAccept + ", */*", jsonAccept},
		{"POST", "/apis/authentication.k8s.io/v1/tokenreviews", "evictiond", protobuf, "application/vnd.kubernetes.protobuf"},
		{"POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", "evictiond", protobuf, "application/vnd.kubernetes.protobuf"},
	}
	sameRequests(t, *got, want)
	if _, err := NewClient(&rest.Config{Host: srv.URL, QPS: 5}); err == nil {
		t.Error("QPS without burst: no error")
	}
}

// The webhook's client asks what client-go's typed clients ask, options included.
func TestAdmissionClientRequests(t *testing.T) {
	srv, got := recordRequests(t)
	a, err := NewAdmissionClient(&rest.Config{Host: srv.URL, UserAgent: "evictiond-webhook"})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "tls"}}
	_, _ = a.Secrets("ns").Get(ctx, "tls", metav1.GetOptions{ResourceVersion: "7"})
	_, _ = a.Secrets("ns").Create(ctx, secret, metav1.CreateOptions{FieldManager: "evictiond"})
	_, _ = a.Secrets("ns").Update(ctx, secret, metav1.UpdateOptions{})
	_, _ = a.ValidatingWebhookConfigurations().Get(ctx, "vwc", metav1.GetOptions{})
	_, _ = a.ValidatingWebhookConfigurations().Patch(ctx, "vwc", types.JSONPatchType, []byte(`[]`), metav1.PatchOptions{})
	_, _ = a.Pods("ns").Get(ctx, "p", metav1.GetOptions{})
	_, _ = a.Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=n1", TimeoutSeconds: ptr.To[int64](5)})
	_ = a.Pods("ns").Delete(ctx, "p", metav1.DeleteOptions{})
	const pb = "application/vnd.kubernetes.protobuf"
	sameRequests(t, *got, []request{
		{"GET", "/api/v1/namespaces/ns/secrets/tls?resourceVersion=7", "evictiond-webhook", protobuf, ""},
		{"POST", "/api/v1/namespaces/ns/secrets?fieldManager=evictiond", "evictiond-webhook", protobuf, pb},
		{"PUT", "/api/v1/namespaces/ns/secrets/tls", "evictiond-webhook", protobuf, pb},
		{"GET", "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/vwc", "evictiond-webhook", protobuf, ""},
		{"PATCH", "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/vwc", "evictiond-webhook", protobuf, string(types.JSONPatchType)},
		{"GET", "/api/v1/namespaces/ns/pods/p", "evictiond-webhook", protobuf, ""},
		{"GET", "/api/v1/pods?fieldSelector=spec.nodeName%3Dn1&timeout=5s&timeoutSeconds=5", "evictiond-webhook", protobuf, ""},
		{"DELETE", "/api/v1/namespaces/ns/pods/p", "evictiond-webhook", protobuf, pb},
	})
}

var agentDeps struct {
	once sync.Once
	pkgs []string
	err  error
}

// agentLinks is every package cmd/evictiond links (go list -deps, once per test binary).
func agentLinks(t *testing.T) []string {
	t.Helper()
	agentDeps.once.Do(func() {
		out, err := exec.Command("go", "list", "-deps", "../../cmd/evictiond").Output()
		agentDeps.pkgs, agentDeps.err = strings.Fields(string(out)), err
	})
	if agentDeps.err != nil {
		t.Fatalf("go list -deps cmd/evictiond: %v", agentDeps.err)
	}
	if !slices.Contains(agentDeps.pkgs, "k8s.io/client-go/rest") {
		t.Fatalf("go list found no k8s.io/client-go/rest in cmd/evictiond's dependencies: %v", agentDeps.pkgs)
	}
	return agentDeps.pkgs
}

// within is whether pkg is one of roots or below one.
func within(pkg string, roots ...string) bool {
	return slices.ContainsFunc(roots, func(r string) bool { return pkg == r || strings.HasPrefix(pkg, r+"/") })
}

// The agent's binary links the API types of Scheme's groups and no typed client of
// client-go: one import of k8s.io/client-go/kubernetes/... (a typed client, its fake,
// the informer factory, discovery) registers every built-in group and brings back the
// 17 MiB this package's own client saves (docs/scale.md, "Where the bytes went").
func TestBinaryLinksOnlyTheGroupsOfScheme(t *testing.T) {
	registered := map[string]bool{}
	for _, typ := range Scheme.AllKnownTypes() {
		registered[typ.PkgPath()] = true
	}
	var apiGroups int
	for _, pkg := range agentLinks(t) {
		if within(pkg, "k8s.io/client-go/kubernetes", "k8s.io/client-go/informers", "k8s.io/client-go/discovery",
			"k8s.io/client-go/applyconfigurations", "k8s.io/client-go/dynamic", "k8s.io/apiserver") {
			t.Errorf("cmd/evictiond links %s: build the client on kube.Interface and kube.Scheme instead", pkg)
		}
		if strings.HasPrefix(pkg, "k8s.io/api/") {
			apiGroups++
			if !registered[pkg] {
				t.Errorf("cmd/evictiond links %s, a group kube.Scheme does not register: register it (and count its bytes) or drop the import", pkg)
			}
		}
	}
	if apiGroups == 0 {
		t.Errorf("go list found no k8s.io/api package in cmd/evictiond's dependencies")
	}
}

// The agent's binary makes its typed calls itself (kube.Resource) and `simulate` runs on
// kubefake's own store: client-go's gentype imports client-go/testing (its fake
// clients), and that the object tracker's managed fields, structured-merge-diff and
// kube-openapi, about 2 MiB of the agent's resident binary (docs/scale.md).
func TestBinaryDoesNotLinkClientGoTesting(t *testing.T) {
	for _, pkg := range agentLinks(t) {
		if within(pkg, "k8s.io/client-go/gentype", "k8s.io/client-go/testing", "k8s.io/apimachinery/pkg/util/managedfields") {
			t.Errorf("cmd/evictiond links %s: make typed calls through kube.Resource, fake the API with kubefake", pkg)
		}
	}
}
