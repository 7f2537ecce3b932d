// Package kubefake is kube.Interface over client-go's object tracker, as client-go's
// kubernetes/fake is kubernetes.Interface over it: the reactors, watches and recorded
// actions of k8s.io/client-go/testing, the objects of kube.Scheme. `evictiond
// simulate` runs the daemon against it, and so do the unit tests (kubernetes/fake
// would link every API group into the binary).
package kubefake

import (
	"context"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/gentype"
	"k8s.io/client-go/rest"
	k8stesting "k8s.io/client-go/testing"

	"github.com/evictiond/evictiond/internal/kube"
)

// Clientset is the fake API server. Its RESTClient is nil: the fake has no paths
// outside the groups (/readyz).
type Clientset struct {
	k8stesting.Fake
	tracker k8stesting.ObjectTracker
}

var _ kube.Interface = (*Clientset)(nil)

// NewClientset is a Clientset holding objs (of kube.Scheme's types), answering every
// action from the tracker unless a reactor prepended later answers first.
func NewClientset(objs ...runtime.Object) (*Clientset, error) {
	tracker := k8stesting.NewObjectTracker(kube.Scheme, serializer.NewCodecFactory(kube.Scheme).UniversalDecoder())
	for _, o := range objs {
		if err := tracker.Add(o); err != nil {
			return nil, err
		}
	}
	c := &Clientset{tracker: tracker}
	c.AddReactor("*", "*", k8stesting.ObjectReaction(tracker))
	c.AddWatchReactor("*", func(action k8stesting.Action) (bool, watch.Interface, error) {
		var opts metav1.ListOptions
		if w, ok := action.(k8stesting.WatchActionImpl); ok {
			opts = w.ListOptions
		}
		w, err := tracker.Watch(action.GetResource(), action.GetNamespace(), opts)
		if err != nil {
			return false, nil, err
		}
		return true, w, nil
	})
	return c, nil
}

// Tracker holds the fake API server's objects.
func (c *Clientset) Tracker() k8stesting.ObjectTracker { return c.tracker }

// IsWatchListSemanticsUnSupported tells client-go's reflector, as kubernetes/fake does,
// that the tracker's watch sends no initial events: list, then watch.
func (c *Clientset) IsWatchListSemanticsUnSupported() bool { return true }

func (c *Clientset) CoreV1() kube.CoreV1Interface     { return coreV1{&c.Fake} }
func (c *Clientset) PolicyV1() kube.PolicyV1Interface { return policyV1{&c.Fake} }
func (c *Clientset) AuthenticationV1() kube.AuthenticationV1Interface {
	return authenticationV1{&c.Fake}
}
func (c *Clientset) AuthorizationV1() kube.AuthorizationV1Interface {
	return authorizationV1{&c.Fake}
}
func (c *Clientset) RESTClient() rest.Interface { return nil }

type coreV1 struct{ f *k8stesting.Fake }

func (g coreV1) Pods(namespace string) kube.PodInterface {
	return gentype.NewFakeClientWithList(g.f, namespace, corev1.SchemeGroupVersion.WithResource("pods"),
		corev1.SchemeGroupVersion.WithKind("Pod"),
		func() *corev1.Pod { return &corev1.Pod{} }, func() *corev1.PodList { return &corev1.PodList{} },
		func(dst, src *corev1.PodList) { dst.ListMeta = src.ListMeta },
		func(l *corev1.PodList) []*corev1.Pod { return gentype.ToPointerSlice(l.Items) },
		func(l *corev1.PodList, items []*corev1.Pod) { l.Items = gentype.FromPointerSlice(items) })
}

func (g coreV1) Nodes() kube.NodeInterface {
	return gentype.NewFakeClientWithList(g.f, "", corev1.SchemeGroupVersion.WithResource("nodes"),
		corev1.SchemeGroupVersion.WithKind("Node"),
		func() *corev1.Node { return &corev1.Node{} }, func() *corev1.NodeList { return &corev1.NodeList{} },
		func(dst, src *corev1.NodeList) { dst.ListMeta = src.ListMeta },
		func(l *corev1.NodeList) []*corev1.Node { return gentype.ToPointerSlice(l.Items) },
		func(l *corev1.NodeList, items []*corev1.Node) { l.Items = gentype.FromPointerSlice(items) })
}

func (g coreV1) Events(namespace string) kube.EventInterface {
	return gentype.NewFakeClient(g.f, namespace, corev1.SchemeGroupVersion.WithResource("events"),
		corev1.SchemeGroupVersion.WithKind("Event"), func() *corev1.Event { return &corev1.Event{} })
}

type policyV1 struct{ f *k8stesting.Fake }

func (g policyV1) Evictions(namespace string) kube.EvictionInterface {
	return evictions{g.f, namespace}
}

type evictions struct {
	f         *k8stesting.Fake
	namespace string
}

// Evict is kubernetes/fake's: a create of the pods' eviction subresource.
func (e evictions) Evict(_ context.Context, eviction *policyv1.Eviction) error {
	action := k8stesting.CreateActionImpl{}
	action.Verb = "create"
	action.Namespace = e.namespace
	action.Resource = corev1.SchemeGroupVersion.WithResource("pods")
	action.Subresource = "eviction"
	action.Object = eviction
	_, err := e.f.Invokes(action, eviction)
	return err
}

type authenticationV1 struct{ f *k8stesting.Fake }

func (g authenticationV1) TokenReviews() kube.TokenReviewInterface {
	return gentype.NewFakeClient(g.f, "", authenticationv1.SchemeGroupVersion.WithResource("tokenreviews"),
		authenticationv1.SchemeGroupVersion.WithKind("TokenReview"),
		func() *authenticationv1.TokenReview { return &authenticationv1.TokenReview{} })
}

type authorizationV1 struct{ f *k8stesting.Fake }

func (g authorizationV1) SubjectAccessReviews() kube.SubjectAccessReviewInterface {
	return gentype.NewFakeClient(g.f, "", authorizationv1.SchemeGroupVersion.WithResource("subjectaccessreviews"),
		authorizationv1.SchemeGroupVersion.WithKind("SubjectAccessReview"),
		func() *authorizationv1.SubjectAccessReview { return &authorizationv1.SubjectAccessReview{} })
}
