package kube

import (
	"context"
	"fmt"
	"net/http"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/flowcontrol"
)

// Scheme holds the API groups evictiond reads and writes, and nothing else. client-go's
// typed clients (k8s.io/client-go/kubernetes/...) all import its kubernetes/scheme,
// which registers every built-in group, and with them their types, deep copies and
// conversions, plus apply configurations and discovery's OpenAPI models: 17 of the 48
// MiB the binary weighed with four of those clients (docs/scale.md). Client makes the
// generated clients' requests itself (Resource) on this scheme instead.
//
// A new group is one AddToScheme line here, its rest.Interface in NewClient, and a
// method on Interface (TestBinaryLinksNoClientsetScheme keeps kubernetes/... out).
var Scheme = runtime.NewScheme()

var (
	codecs         = serializer.NewCodecFactory(Scheme)
	parameterCodec = runtime.NewParameterCodec(Scheme)
)

func init() {
	metav1.AddToGroupVersion(Scheme, schema.GroupVersion{Version: "v1"})
	utilruntime.Must(corev1.AddToScheme(Scheme))
	utilruntime.Must(policyv1.AddToScheme(Scheme))
	utilruntime.Must(authenticationv1.AddToScheme(Scheme))
	utilruntime.Must(authorizationv1.AddToScheme(Scheme))
	// The eviction webhook: its configuration (AdmissionClient) and the AdmissionReview it
	// answers (internal/admission decodes it as JSON; registered so that every API type the
	// binary links is one of Scheme's).
	utilruntime.Must(admissionregistrationv1.AddToScheme(Scheme))
	utilruntime.Must(admissionv1.AddToScheme(Scheme))
}

// Interface is the API server as evictiond calls it, in client-go's shapes
// (client.CoreV1().Pods(ns).List(...)) but with the verbs it uses only, so that the
// daemon, simulate's fake API (internal/kube/kubefake) and the tests share one type.
// Client-go's typed clients satisfy each resource interface as they are.
type Interface interface {
	CoreV1() CoreV1Interface
	PolicyV1() PolicyV1Interface
	AuthenticationV1() AuthenticationV1Interface
	AuthorizationV1() AuthorizationV1Interface
	// RESTClient asks paths outside the groups (the API server's /readyz).
	RESTClient() rest.Interface
}

// CoreV1Interface is core/v1 as evictiond uses it.
type CoreV1Interface interface {
	Pods(namespace string) PodInterface
	Nodes() NodeInterface
	Events(namespace string) EventInterface
}

// PodInterface reads a node's pods (informers, observe) and deletes one (the
// escalation past a PDB).
type PodInterface interface {
	Get(ctx context.Context, name string, opts metav1.GetOptions) (*corev1.Pod, error)
	List(ctx context.Context, opts metav1.ListOptions) (*corev1.PodList, error)
	Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
	Delete(ctx context.Context, name string, opts metav1.DeleteOptions) error
}

// NodeInterface reads the agent's node and patches its conditions and taints.
type NodeInterface interface {
	Get(ctx context.Context, name string, opts metav1.GetOptions) (*corev1.Node, error)
	List(ctx context.Context, opts metav1.ListOptions) (*corev1.NodeList, error)
	Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
	Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, subresources ...string) (*corev1.Node, error)
}

// EventInterface is what client-go's event correlator writes (eventSink).
type EventInterface interface {
	Create(ctx context.Context, event *corev1.Event, opts metav1.CreateOptions) (*corev1.Event, error)
	Update(ctx context.Context, event *corev1.Event, opts metav1.UpdateOptions) (*corev1.Event, error)
	Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, subresources ...string) (*corev1.Event, error)
}

// PolicyV1Interface is policy/v1 as evictiond uses it.
type PolicyV1Interface interface {
	Evictions(namespace string) EvictionInterface
}

// EvictionInterface asks the Eviction API (pods/eviction) to evict a pod.
type EvictionInterface interface {
	Evict(ctx context.Context, eviction *policyv1.Eviction) error
}

// AuthenticationV1Interface is authentication/v1 as the metrics server uses it.
type AuthenticationV1Interface interface {
	TokenReviews() TokenReviewInterface
}

// TokenReviewInterface asks who a bearer token belongs to.
type TokenReviewInterface interface {
	Create(ctx context.Context, review *authenticationv1.TokenReview, opts metav1.CreateOptions) (*authenticationv1.TokenReview, error)
}

// AuthorizationV1Interface is authorization/v1 as the metrics server uses it.
type AuthorizationV1Interface interface {
	SubjectAccessReviews() SubjectAccessReviewInterface
}

// SubjectAccessReviewInterface asks whether a user may do something.
type SubjectAccessReviewInterface interface {
	Create(ctx context.Context, review *authorizationv1.SubjectAccessReview, opts metav1.CreateOptions) (*authorizationv1.SubjectAccessReview, error)
}

// Client is Interface on the API server: one REST client per group, all on one
// HTTP client (one connection pool) and one token bucket, as kubernetes.NewForConfig
// builds them.
type Client struct {
	core, policy, authentication, authorization *rest.RESTClient
}

var _ Interface = (*Client)(nil)

// NewClient is kubernetes.NewForConfig for the groups of Interface: one transport and,
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
	for _, g := range []struct {
		gv      schema.GroupVersion
		apiPath string
		into    **rest.RESTClient
	}{
		{corev1.SchemeGroupVersion, "/api", &cl.core},
		{policyv1.SchemeGroupVersion, "/apis", &cl.policy},
		{authenticationv1.SchemeGroupVersion, "/apis", &cl.authentication},
		{authorizationv1.SchemeGroupVersion, "/apis", &cl.authorization},
	} {
		if *g.into, err = groupClient(cfg, httpClient, g.gv, g.apiPath); err != nil {
			return nil, fmt.Errorf("%s client: %w", g.gv, err)
		}
	}
	return cl, nil
}

// groupClient is a generated client's setConfigDefaults and RESTClientForConfigAndClient
// on Scheme.
func groupClient(cfg rest.Config, h *http.Client, gv schema.GroupVersion, apiPath string) (*rest.RESTClient, error) {
	cfg.GroupVersion = &gv
	cfg.APIPath = apiPath
	cfg.NegotiatedSerializer = rest.CodecFactoryForGeneratedClient(Scheme, codecs).WithoutConversion()
	return rest.RESTClientForConfigAndClient(&cfg, h)
}

func (c *Client) CoreV1() CoreV1Interface     { return coreV1{c.core} }
func (c *Client) PolicyV1() PolicyV1Interface { return policyV1{c.policy} }
func (c *Client) AuthenticationV1() AuthenticationV1Interface {
	return authenticationV1{c.authentication}
}
func (c *Client) AuthorizationV1() AuthorizationV1Interface { return authorizationV1{c.authorization} }
func (c *Client) RESTClient() rest.Interface                { return c.core }

type coreV1 struct{ rc rest.Interface }

func (g coreV1) Pods(namespace string) PodInterface {
	return listResource[*corev1.Pod, *corev1.PodList]{
		Resource[*corev1.Pod]{g.rc, "pods", namespace, func() *corev1.Pod { return &corev1.Pod{} }},
		func() *corev1.PodList { return &corev1.PodList{} }}
}

func (g coreV1) Nodes() NodeInterface {
	return listResource[*corev1.Node, *corev1.NodeList]{
		Resource[*corev1.Node]{g.rc, "nodes", "", func() *corev1.Node { return &corev1.Node{} }},
		func() *corev1.NodeList { return &corev1.NodeList{} }}
}

func (g coreV1) Events(namespace string) EventInterface {
	return Resource[*corev1.Event]{g.rc, "events", namespace, func() *corev1.Event { return &corev1.Event{} }}
}

type policyV1 struct{ rc rest.Interface }

// Evictions: an Eviction names its namespace itself, as client-go's does.
func (g policyV1) Evictions(string) EvictionInterface { return evictions(g) }

type evictions struct{ rc rest.Interface }

// Evict is client-go's policy/v1 EvictionExpansion.Evict: a POST to the pod's eviction
// subresource (core/v1's path, the policy group's body, as JSON).
func (e evictions) Evict(ctx context.Context, eviction *policyv1.Eviction) error {
	return e.rc.Post().AbsPath("/api/v1").Namespace(eviction.Namespace).Resource("pods").
		Name(eviction.Name).SubResource("eviction").Body(eviction).Do(ctx).Error()
}

type authenticationV1 struct{ rc rest.Interface }

func (g authenticationV1) TokenReviews() TokenReviewInterface {
	return Resource[*authenticationv1.TokenReview]{g.rc, "tokenreviews", "",
		func() *authenticationv1.TokenReview { return &authenticationv1.TokenReview{} }}
}

type authorizationV1 struct{ rc rest.Interface }

func (g authorizationV1) SubjectAccessReviews() SubjectAccessReviewInterface {
	return Resource[*authorizationv1.SubjectAccessReview]{g.rc, "subjectaccessreviews", "",
		func() *authorizationv1.SubjectAccessReview { return &authorizationv1.SubjectAccessReview{} }}
}

// Object is an API object with metadata (every resource's item type).
type Object interface {
	runtime.Object
	metav1.Object
}

// Resource is one resource of one group in one namespace ("": all, or cluster-scoped),
// requested as client-go's generated typed clients request it: what client-go's gentype
// does, without gentype, which imports client-go/testing (its fake) and with it the
// managed-fields and OpenAPI machinery, about 2 MiB of resident binary (docs/scale.md).
// Every resource goes as protobuf, as the generated clients send the built-in groups.
type Resource[T Object] struct {
	rc        rest.Interface
	name      string
	namespace string
	newObject func() T
}

// listResource is a resource that is also listed and watched.
type listResource[T Object, L runtime.Object] struct {
	Resource[T]
	newList func() L
}

func (r Resource[T]) request(req *rest.Request) *rest.Request {
	return req.UseProtobufAsDefaultIfPreferred(true).NamespaceIfScoped(r.namespace, r.namespace != "").Resource(r.name)
}

// timeout is a list's or watch's TimeoutSeconds as the request's timeout (0: none).
func timeout(opts metav1.ListOptions) time.Duration {
	if opts.TimeoutSeconds == nil {
		return 0
	}
	return time.Duration(*opts.TimeoutSeconds) * time.Second
}

func (r Resource[T]) Get(ctx context.Context, name string, opts metav1.GetOptions) (T, error) {
	result := r.newObject()
	err := r.request(r.rc.Get()).Name(name).VersionedParams(&opts, parameterCodec).Do(ctx).Into(result)
	return result, err
}

func (r listResource[T, L]) List(ctx context.Context, opts metav1.ListOptions) (L, error) {
	result := r.newList()
	err := r.request(r.rc.Get()).VersionedParams(&opts, parameterCodec).Timeout(timeout(opts)).Do(ctx).Into(result)
	return result, err
}

func (r Resource[T]) Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	opts.Watch = true
	return r.request(r.rc.Get()).VersionedParams(&opts, parameterCodec).Timeout(timeout(opts)).Watch(ctx)
}

func (r Resource[T]) Create(ctx context.Context, obj T, opts metav1.CreateOptions) (T, error) {
	result := r.newObject()
	err := r.request(r.rc.Post()).VersionedParams(&opts, parameterCodec).Body(obj).Do(ctx).Into(result)
	return result, err
}

func (r Resource[T]) Update(ctx context.Context, obj T, opts metav1.UpdateOptions) (T, error) {
	result := r.newObject()
	err := r.request(r.rc.Put()).Name(obj.GetName()).VersionedParams(&opts, parameterCodec).Body(obj).Do(ctx).Into(result)
	return result, err
}

func (r Resource[T]) Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, subresources ...string) (T, error) {
	result := r.newObject()
	err := r.request(r.rc.Patch(pt)).Name(name).SubResource(subresources...).VersionedParams(&opts, parameterCodec).
		Body(data).Do(ctx).Into(result)
	return result, err
}

func (r Resource[T]) Delete(ctx context.Context, name string, opts metav1.DeleteOptions) error {
	return r.request(r.rc.Delete()).Name(name).Body(&opts).Do(ctx).Error()
}
