package kube

import (
	"fmt"

	"k8s.io/client-go/discovery"
	"k8s.io/client-go/kubernetes"
	authenticationv1 "k8s.io/client-go/kubernetes/typed/authentication/v1"
	authorizationv1 "k8s.io/client-go/kubernetes/typed/authorization/v1"
	corev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	policyv1 "k8s.io/client-go/kubernetes/typed/policy/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/flowcontrol"
)

// Client is kubernetes.Interface with the API groups evictiond calls: core/v1 (pods,
// nodes, Events), policy/v1 (evictions), authentication/v1 and authorization/v1 (the
// metrics server's reviews), and discovery's REST client (Reachability's /readyz).
// kubernetes.NewForConfig builds a client of every group, and so links all of them
// into the binary; any other group's method here is the nil embedded interface's and
// panics: a new call to one belongs in NewClient first (TestClientServesTheAgentsGroups).
type Client struct {
	kubernetes.Interface

	core           *corev1.CoreV1Client
	policy         *policyv1.PolicyV1Client
	authentication *authenticationv1.AuthenticationV1Client
	authorization  *authorizationv1.AuthorizationV1Client
	discovery      *discovery.DiscoveryClient
}

// NewClient is kubernetes.NewForConfig for the groups of Client: one transport and,
// when c sets QPS without a RateLimiter, one token bucket shared by all of them.
func NewClient(c *rest.Config) (*Client, error) {
	cfg := *c
	if cfg.UserAgent == "" {
		cfg.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	if cfg.RateLimiter == nil && cfg.QPS > 0 {
		if cfg.Burst <= 0 {
			return nil, fmt.Errorf("API client: burst must be above 0 when QPS is set without a RateLimiter")
		}
		cfg.RateLimiter = flowcontrol.NewTokenBucketRateLimiter(cfg.QPS, cfg.Burst)
	}
	httpClient, err := rest.HTTPClientFor(&cfg)
	if err != nil {
		return nil, fmt.Errorf("API client transport: %w", err)
	}
	cl := &Client{}
	if cl.core, err = corev1.NewForConfigAndClient(&cfg, httpClient); err != nil {
		return nil, fmt.Errorf("core/v1 client: %w", err)
	}
	if cl.policy, err = policyv1.NewForConfigAndClient(&cfg, httpClient); err != nil {
		return nil, fmt.Errorf("policy/v1 client: %w", err)
	}
	if cl.authentication, err = authenticationv1.NewForConfigAndClient(&cfg, httpClient); err != nil {
		return nil, fmt.Errorf("authentication/v1 client: %w", err)
	}
	if cl.authorization, err = authorizationv1.NewForConfigAndClient(&cfg, httpClient); err != nil {
		return nil, fmt.Errorf("authorization/v1 client: %w", err)
	}
	if cl.discovery, err = discovery.NewDiscoveryClientForConfigAndClient(&cfg, httpClient); err != nil {
		return nil, fmt.Errorf("discovery client: %w", err)
	}
	return cl, nil
}

func (c *Client) CoreV1() corev1.CoreV1Interface       { return c.core }
func (c *Client) PolicyV1() policyv1.PolicyV1Interface { return c.policy }
func (c *Client) AuthenticationV1() authenticationv1.AuthenticationV1Interface {
	return c.authentication
}
func (c *Client) AuthorizationV1() authorizationv1.AuthorizationV1Interface {
	return c.authorization
}
func (c *Client) Discovery() discovery.DiscoveryInterface { return c.discovery }
