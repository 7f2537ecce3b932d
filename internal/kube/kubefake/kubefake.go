// Package kubefake is kube.Interface over an in-memory API server: objects of
// kube.Scheme with resourceVersions, lists and watches with label and field
// selectors, merge and strategic merge patches, hooks that answer a call instead of
// the store, and the calls recorded. `evictiond simulate` runs the daemon against it,
// and so do the unit tests. It replaces client-go's object tracker (k8s.io/client-go/
// testing), which links apimachinery's managed fields, structured-merge-diff and
// kube-openapi into any binary that imports it: about 2 MiB of resident binary on
// every node (docs/scale.md).
package kubefake

import (
	"context"
	"fmt"
	"slices"
	"sync"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"

	"github.com/evictiond/evictiond/internal/kube"
)

// Action is one call of the API as the fake received it.
type Action struct {
	Verb        string // get, list, watch, create, update, patch, delete
	Resource    string // pods, nodes, events, tokenreviews, subjectaccessreviews
	Subresource string // eviction, status
	Namespace   string
	Name        string
	// Object is a create's or update's body (a copy): an Eviction for pods/eviction.
	Object runtime.Object
	// PatchType and Patch are a patch's.
	PatchType types.PatchType
	Patch     []byte
	// ListOptions are a list's or watch's; DeleteOptions a delete's.
	ListOptions   metav1.ListOptions
	DeleteOptions metav1.DeleteOptions
}

// Hook answers a call instead of the store when handled: the object returned (nil
// for a delete or an eviction) or the error. Not handled, the call goes on to the
// next hook, and last to the store.
type Hook func(Action) (handled bool, obj runtime.Object, err error)

// WatchHook answers a watch instead of the store when handled.
type WatchHook func(Action) (handled bool, w watch.Interface, err error)

type hook struct {
	verb, resource string
	call           Hook
	watch          WatchHook
}

// Clientset is the fake API server. Its RESTClient is nil: the fake has no paths
// outside the groups (/readyz).
type Clientset struct {
	store *Store

	mu      sync.Mutex
	hooks   []hook // the latest first
	actions []Action
}

var _ kube.Interface = (*Clientset)(nil)

// NewClientset is a Clientset holding objs (of kube.Scheme's types).
func NewClientset(objs ...runtime.Object) (*Clientset, error) {
	c := &Clientset{store: newStore()}
	for _, o := range objs {
		if err := c.store.Add(o); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// Store holds the fake API server's objects.
func (c *Clientset) Store() *Store { return c.store }

// OnCall makes h answer the calls of verb on resource (all its subresources) before
// the hooks added earlier and the store.
func (c *Clientset) OnCall(verb, resource string, h Hook) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.hooks = slices.Insert(c.hooks, 0, hook{verb: verb, resource: resource, call: h})
}

// OnWatch makes h answer the watches of resource before the hooks added earlier and
// the store.
func (c *Clientset) OnWatch(resource string, h WatchHook) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.hooks = slices.Insert(c.hooks, 0, hook{verb: "watch", resource: resource, watch: h})
}

// Actions are the calls received so far, in order.
func (c *Clientset) Actions() []Action {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.actions)
}

// IsWatchListSemanticsUnSupported tells client-go's reflector, as kubernetes/fake does,
// that the fake does not stream a list as a watch: list, then watch.
func (c *Clientset) IsWatchListSemanticsUnSupported() bool { return true }

// record keeps a and returns the hooks that may answer it, the latest first.
func (c *Clientset) record(a Action) []hook {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.actions = append(c.actions, a)
	var hs []hook
	for _, h := range c.hooks {
		if h.verb == a.Verb && h.resource == a.Resource {
			hs = append(hs, h)
		}
	}
	return hs
}

// invoke records a and answers it from the hooks or else from store, the call's own
// handling.
func (c *Clientset) invoke(a Action, store func() (runtime.Object, error)) (runtime.Object, error) {
	for _, h := range c.record(a) {
		if handled, obj, err := h.call(a); handled {
			return obj, err
		}
	}
	return store()
}

func (c *Clientset) CoreV1() kube.CoreV1Interface     { return coreV1{c} }
func (c *Clientset) PolicyV1() kube.PolicyV1Interface { return policyV1{c} }
func (c *Clientset) AuthenticationV1() kube.AuthenticationV1Interface {
	return authenticationV1{c}
}
func (c *Clientset) AuthorizationV1() kube.AuthorizationV1Interface { return authorizationV1{c} }
func (c *Clientset) RESTClient() rest.Interface                     { return nil }

type coreV1 struct{ c *Clientset }

func (g coreV1) Pods(namespace string) kube.PodInterface {
	return listResource[*corev1.Pod, *corev1.PodList]{
		resource[*corev1.Pod]{g.c, "pods", namespace, func() *corev1.Pod { return &corev1.Pod{} }},
		func() *corev1.PodList { return &corev1.PodList{} }}
}

func (g coreV1) Nodes() kube.NodeInterface {
	return listResource[*corev1.Node, *corev1.NodeList]{
		resource[*corev1.Node]{g.c, "nodes", "", func() *corev1.Node { return &corev1.Node{} }},
		func() *corev1.NodeList { return &corev1.NodeList{} }}
}

func (g coreV1) Events(namespace string) kube.EventInterface {
	return resource[*corev1.Event]{g.c, "events", namespace, func() *corev1.Event { return &corev1.Event{} }}
}

type policyV1 struct{ c *Clientset }

func (g policyV1) Evictions(namespace string) kube.EvictionInterface {
	return evictions{g.c, namespace}
}

type evictions struct {
	c         *Clientset
	namespace string
}

// Evict is a create of the pod's eviction subresource. The store answers it as
// client-go's object tracker did: 201 if the pod exists (and the eviction's UID
// precondition holds), without deleting it; a scenario or a test says when pods go.
func (e evictions) Evict(_ context.Context, eviction *policyv1.Eviction) error {
	ns := eviction.Namespace
	if ns == "" {
		ns = e.namespace
	}
	a := Action{Verb: "create", Resource: "pods", Subresource: "eviction", Namespace: ns, Name: eviction.Name,
		Object: eviction.DeepCopy()}
	_, err := e.c.invoke(a, func() (runtime.Object, error) {
		pod, err := e.c.store.Get("pods", ns, eviction.Name)
		if err != nil {
			return nil, err
		}
		if o := eviction.DeleteOptions; o != nil {
			if err := checkPreconditions("pods", pod, o.Preconditions); err != nil {
				return nil, err
			}
		}
		return nil, nil
	})
	return err
}

type authenticationV1 struct{ c *Clientset }

func (g authenticationV1) TokenReviews() kube.TokenReviewInterface {
	return review[*authenticationv1.TokenReview]{g.c, "tokenreviews"}
}

type authorizationV1 struct{ c *Clientset }

func (g authorizationV1) SubjectAccessReviews() kube.SubjectAccessReviewInterface {
	return review[*authorizationv1.SubjectAccessReview]{g.c, "subjectaccessreviews"}
}

// review is a create-only review resource: the store answers with the review as sent
// (not authenticated, not allowed) and keeps nothing; a hook answers for real.
type review[T runtime.Object] struct {
	c        *Clientset
	resource string
}

func (r review[T]) Create(_ context.Context, obj T, _ metav1.CreateOptions) (T, error) {
	sent := obj.DeepCopyObject()
	out, err := r.c.invoke(Action{Verb: "create", Resource: r.resource, Object: sent},
		func() (runtime.Object, error) { return sent, nil })
	return typed(out, err, func() T { return obj.DeepCopyObject().(T) })
}

// resource is one resource in one namespace ("": all, or cluster-scoped).
type resource[T kube.Object] struct {
	c         *Clientset
	name      string
	namespace string
	newObject func() T
}

// listResource is a resource that is also listed.
type listResource[T kube.Object, L runtime.Object] struct {
	resource[T]
	newList func() L
}

// typed is a call's answer as T: on an error, or when a hook answers nil, an empty T,
// as client-go's typed clients return.
func typed[T runtime.Object](obj runtime.Object, err error, empty func() T) (T, error) {
	if obj == nil {
		return empty(), err
	}
	t, ok := obj.(T)
	if !ok {
		return empty(), fmt.Errorf("fake API server: answered a %T where a %T was asked for", obj, empty())
	}
	return t, err
}

func (r resource[T]) action(verb, name string) Action {
	return Action{Verb: verb, Resource: r.name, Namespace: r.namespace, Name: name}
}

func (r resource[T]) Get(_ context.Context, name string, _ metav1.GetOptions) (T, error) {
	out, err := r.c.invoke(r.action("get", name), func() (runtime.Object, error) {
		return r.c.store.Get(r.name, r.namespace, name)
	})
	return typed(out, err, r.newObject)
}

func (r listResource[T, L]) List(_ context.Context, opts metav1.ListOptions) (L, error) {
	a := r.action("list", "")
	a.ListOptions = opts
	out, err := r.c.invoke(a, func() (runtime.Object, error) {
		items, rv, err := r.c.store.List(r.name, r.namespace, opts)
		if err != nil {
			return nil, err
		}
		list := r.newList()
		if err := meta.SetList(list, items); err != nil {
			return nil, err
		}
		lm, err := meta.ListAccessor(list)
		if err != nil {
			return nil, err
		}
		lm.SetResourceVersion(rv)
		return list, nil
	})
	return typed(out, err, r.newList)
}

// Watch ends when ctx does, as a watch over HTTP does (the store's; a hook's watch is
// the hook's to end).
func (r resource[T]) Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	a := r.action("watch", "")
	a.ListOptions = opts
	hs := r.c.record(a)
	w, err := func() (watch.Interface, error) {
		for _, h := range hs {
			if handled, w, err := h.watch(a); handled {
				return w, err
			}
		}
		return r.c.store.Watch(r.name, r.namespace, opts)
	}()
	if sw, ok := w.(*watcher); ok && err == nil {
		go func() {
			select {
			case <-ctx.Done():
				sw.Stop()
			case <-sw.done:
			}
		}()
	}
	return w, err
}

func (r resource[T]) Create(_ context.Context, obj T, _ metav1.CreateOptions) (T, error) {
	return r.put("create", obj)
}

func (r resource[T]) Update(_ context.Context, obj T, _ metav1.UpdateOptions) (T, error) {
	return r.put("update", obj)
}

// put is a create or an update of obj, in the client's namespace.
func (r resource[T]) put(verb string, obj T) (T, error) {
	a := r.action(verb, obj.GetName())
	a.Object = obj.DeepCopyObject()
	out, err := r.c.invoke(a, func() (runtime.Object, error) {
		o, err := r.inNamespace(obj)
		if err != nil {
			return nil, err
		}
		return r.c.store.put(r.name, o, verb == "create")
	})
	return typed(out, err, r.newObject)
}

// inNamespace is a copy of obj in the client's namespace, or a 400 if obj names
// another.
func (r resource[T]) inNamespace(obj T) (runtime.Object, error) {
	o := obj.DeepCopyObject().(T)
	switch ns := o.GetNamespace(); {
	case ns == "":
		o.SetNamespace(r.namespace)
	case r.namespace != "" && ns != r.namespace:
		return nil, apierrors.NewBadRequest(fmt.Sprintf("the namespace of the object (%s) does not match the namespace of the request (%s)", ns, r.namespace))
	}
	return o, nil
}

func (r resource[T]) Patch(_ context.Context, name string, pt types.PatchType, data []byte, _ metav1.PatchOptions, subresources ...string) (T, error) {
	a := r.action("patch", name)
	a.PatchType, a.Patch = pt, append([]byte(nil), data...)
	if len(subresources) > 0 {
		a.Subresource = subresources[0]
	}
	out, err := r.c.invoke(a, func() (runtime.Object, error) {
		return r.c.store.patch(r.name, r.namespace, name, pt, data)
	})
	return typed(out, err, r.newObject)
}

func (r resource[T]) Delete(_ context.Context, name string, opts metav1.DeleteOptions) error {
	a := r.action("delete", name)
	a.DeleteOptions = opts
	_, err := r.c.invoke(a, func() (runtime.Object, error) {
		return r.c.store.delete(r.name, r.namespace, name, opts.Preconditions)
	})
	return err
}
