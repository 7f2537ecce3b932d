//go:build e2e

package cluster

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
)

const (
	// EvictiondMetricsPort serves /metrics over HTTPS to callers the API server authorizes
	// (deploy/: --metrics-address); evictiond runs on the host network.
	EvictiondMetricsPort = 9809
	// MetricsReaderRole is the ClusterRole deploy/ ships for scrapers of evictiond.
	MetricsReaderRole = "evictiond-metrics-reader"
	// ScraperNamespace and ScraperServiceAccount are the scrapers' identity in the tests,
	// as a Prometheus installation would have one.
	ScraperNamespace      = "e2e-monitoring"
	ScraperServiceAccount = "prometheus"
)

type scraper struct {
	mu    sync.Mutex
	token string
}

// ScraperToken returns a token of the ServiceAccount e2e-monitoring/prometheus, bound to
// deploy/'s evictiond-metrics-reader ClusterRole; both are created on first use, and the
// call returns once the API server authorizes the binding.
func (c *Cluster) ScraperToken(ctx context.Context) (string, error) {
	c.scraper.mu.Lock()
	defer c.scraper.mu.Unlock()
	if c.scraper.token != "" {
		return c.scraper.token, nil
	}
	if _, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ScraperNamespace}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return "", fmt.Errorf("creating namespace %s: %w", ScraperNamespace, err)
	}
	if _, err := c.Client.CoreV1().ServiceAccounts(ScraperNamespace).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: ScraperServiceAccount}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return "", fmt.Errorf("creating serviceaccount %s/%s: %w", ScraperNamespace, ScraperServiceAccount, err)
	}
	if _, err := c.Client.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "e2e-prometheus-reads-evictiond"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: MetricsReaderRole},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ScraperNamespace, Name: ScraperServiceAccount}},
	}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return "", fmt.Errorf("binding %s: %w", MetricsReaderRole, err)
	}
	// evictiond caches a denial for 30 s: scrape only once the binding is in force.
	user := "system:serviceaccount:" + ScraperNamespace + ":" + ScraperServiceAccount
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		sar, err := c.Client.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User: user, Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + ScraperNamespace, "system:authenticated"},
			NonResourceAttributes: &authorizationv1.NonResourceAttributes{Path: "/metrics", Verb: "get"},
		}}, metav1.CreateOptions{})
		return err == nil && sar.Status.Allowed, nil
	})
	if err != nil {
		return "", fmt.Errorf("%s not allowed get /metrics within 30 s of binding %s: %w", user, MetricsReaderRole, err)
	}
	cfg, err := c.API.ServiceAccountConfig(ctx, ScraperNamespace, ScraperServiceAccount, nil)
	if err != nil {
		return "", err
	}
	c.scraper.token = cfg.BearerToken
	return c.scraper.token, nil
}

// EvictiondMetrics scrapes evictiond's /metrics on the node as Prometheus would: HTTPS
// (the agent's certificate is self-signed, so unverified) with the scraper's token.
func (c *Cluster) EvictiondMetrics(ctx context.Context) (string, error) {
	token, err := c.ScraperToken(ctx)
	if err != nil {
		return "", err
	}
	url := "https://127.0.0.1:" + strconv.Itoa(EvictiondMetricsPort) + "/metrics"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	// No keep-alive: a connection left idle per scrape stays open in the agent
	// (its server has no idle timeout), and the soak, which scrapes every 5 s,
	// counted them as the agent's fds and goroutines growing (+126 each in 3.5 min).
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, DisableKeepAlives: true}}
	resp, err := client.Do(req)
	if err != nil {
		return "", fmt.Errorf("fetching evictiond metrics: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", fmt.Errorf("reading evictiond metrics: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET %s as %s/%s: HTTP %d: %s", url, ScraperNamespace, ScraperServiceAccount, resp.StatusCode, body)
	}
	return string(body), nil
}
