package kubefake

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/evictiond/evictiond/internal/kube"
)

// historyLength is how many writes the store keeps for watches that start at an older
// resourceVersion (the API server's watch cache keeps a window too): a watch from before
// the window is told 410 Gone, and a reflector then lists again.
const historyLength = 1024

// Store is the fake API server's storage: objects of kube.Scheme by resource,
// namespace and name, one resourceVersion counter for all of them (as etcd's revision),
// and the watches. Its methods act behind the API, as a kubelet or a scheduler would:
// they are neither recorded as actions nor seen by hooks.
type Store struct {
	mu       sync.Mutex
	rv       uint64
	objects  map[string]map[types.NamespacedName]runtime.Object
	history  []change // the last historyLength writes, oldest first
	watchers map[*watcher]bool
}

// change is one write as a watch reports it.
type change struct {
	rv       uint64
	resource string
	old, obj runtime.Object // old: nil on a create; obj: the object deleted on a delete
	typ      watch.EventType
}

func newStore() *Store {
	return &Store{objects: map[string]map[types.NamespacedName]runtime.Object{}, watchers: map[*watcher]bool{}}
}

// resourceOf is the resource an object of kube.Scheme is stored under: pods for a Pod.
func resourceOf(obj runtime.Object) (string, error) {
	kinds, _, err := kube.Scheme.ObjectKinds(obj)
	if err != nil {
		return "", err
	}
	plural, _ := meta.UnsafeGuessKindToResource(kinds[0])
	return plural.Resource, nil
}

// Add stores a new object (a copy) at the next resourceVersion and tells the watches.
func (s *Store) Add(obj runtime.Object) error {
	resource, err := resourceOf(obj)
	if err != nil {
		return err
	}
	_, err = s.put(resource, obj, true)
	return err
}

// Delete removes an object and tells the watches.
func (s *Store) Delete(resource, namespace, name string) error {
	_, err := s.delete(resource, namespace, name, nil)
	return err
}

// Get is a copy of a stored object.
func (s *Store) Get(resource, namespace, name string) (runtime.Object, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	obj, ok := s.objects[resource][types.NamespacedName{Namespace: namespace, Name: name}]
	if !ok {
		return nil, apierrors.NewNotFound(groupResource(resource), name)
	}
	return obj.DeepCopyObject(), nil
}

// List is a copy of the objects of resource in namespace ("": all) that opts' label
// and field selectors select, ordered by namespace and name, and the store's
// resourceVersion.
func (s *Store) List(resource, namespace string, opts metav1.ListOptions) ([]runtime.Object, string, error) {
	sel, err := newSelector(resource, namespace, opts)
	if err != nil {
		return nil, "", err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	keys := make([]types.NamespacedName, 0, len(s.objects[resource]))
	for k, obj := range s.objects[resource] {
		if sel.matches(obj) {
			keys = append(keys, k)
		}
	}
	slices.SortFunc(keys, func(a, b types.NamespacedName) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
	out := make([]runtime.Object, len(keys))
	for i, k := range keys {
		out[i] = s.objects[resource][k].DeepCopyObject()
	}
	return out, strconv.FormatUint(s.rv, 10), nil
}

// Watch reports the writes to the objects of resource in namespace ("": all) that opts'
// selectors select, in order, each at its resourceVersion, as the API server does: from
// opts.ResourceVersion on (410 Gone if the store no longer holds the writes after it),
// or, without one or with "0", an ADDED event for every selected object first. An
// object that stops matching the selectors is reported DELETED, one that starts, ADDED.
func (s *Store) Watch(resource, namespace string, opts metav1.ListOptions) (watch.Interface, error) {
	sel, err := newSelector(resource, namespace, opts)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	w := newWatcher(s, resource, sel)
	switch rv := opts.ResourceVersion; rv {
	case "", "0":
		objs := make([]runtime.Object, 0, len(s.objects[resource]))
		for _, obj := range s.objects[resource] {
			if sel.matches(obj) {
				objs = append(objs, obj)
			}
		}
		slices.SortFunc(objs, func(a, b runtime.Object) int { return cmp.Compare(key(a), key(b)) })
		for _, obj := range objs {
			w.send(watch.Event{Type: watch.Added, Object: obj.DeepCopyObject()})
		}
	default:
		from, err := strconv.ParseUint(rv, 10, 64)
		if err != nil {
			return nil, apierrors.NewBadRequest(fmt.Sprintf("resourceVersion %q: not a resourceVersion of this API server", rv))
		}
		if len(s.history) > 0 && from+1 < s.history[0].rv {
			return nil, apierrors.NewResourceExpired(fmt.Sprintf("too old resource version: %d (%d)", from, s.history[0].rv-1))
		}
		for _, c := range s.history {
			if c.rv > from && c.resource == resource {
				w.observe(c)
			}
		}
	}
	s.watchers[w] = true
	go w.run()
	return w, nil
}

func key(obj runtime.Object) string {
	m, _ := meta.Accessor(obj)
	return m.GetNamespace() + "/" + m.GetName()
}

func groupResource(resource string) schema.GroupResource {
	gr := schema.GroupResource{Resource: resource}
	switch resource {
	case "tokenreviews":
		gr.Group = "authentication.k8s.io"
	case "subjectaccessreviews":
		gr.Group = "authorization.k8s.io"
	}
	return gr
}

// put stores a copy of obj: a create (AlreadyExists if stored) or an update of the
// stored object (NotFound if not; a resourceVersion in obj must be the stored one, 409
// Conflict otherwise, as the API server's optimistic concurrency has it).
func (s *Store) put(resource string, obj runtime.Object, create bool) (runtime.Object, error) {
	obj = obj.DeepCopyObject()
	m, err := meta.Accessor(obj)
	if err != nil {
		return nil, err
	}
	k := types.NamespacedName{Namespace: m.GetNamespace(), Name: m.GetName()}
	if k.Name == "" {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("%s: metadata.name: Required value", resource))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	old, ok := s.objects[resource][k]
	switch {
	case create && ok:
		return nil, apierrors.NewAlreadyExists(groupResource(resource), k.Name)
	case create && s.objects[resource] == nil:
		s.objects[resource] = map[types.NamespacedName]runtime.Object{}
	case !create && !ok:
		return nil, apierrors.NewNotFound(groupResource(resource), k.Name)
	case !create && m.GetResourceVersion() != "" && m.GetResourceVersion() != resourceVersion(old):
		return nil, apierrors.NewConflict(groupResource(resource), k.Name,
			fmt.Errorf("the object has been modified (resourceVersion %s, stored %s); please apply your changes to the latest version and try again",
				m.GetResourceVersion(), resourceVersion(old)))
	}
	s.write(resource, k, old, obj, false)
	return obj.DeepCopyObject(), nil
}

// delete removes a stored object, if preconditions (UID, resourceVersion) hold.
func (s *Store) delete(resource, namespace, name string, pre *metav1.Preconditions) (runtime.Object, error) {
	k := types.NamespacedName{Namespace: namespace, Name: name}
	s.mu.Lock()
	defer s.mu.Unlock()
	old, ok := s.objects[resource][k]
	if !ok {
		return nil, apierrors.NewNotFound(groupResource(resource), name)
	}
	if err := checkPreconditions(resource, old, pre); err != nil {
		return nil, err
	}
	gone := old.DeepCopyObject()
	s.write(resource, k, old, gone, true)
	return gone.DeepCopyObject(), nil
}

// checkPreconditions is the API server's answer to a delete whose preconditions do not
// hold: 409 Conflict.
func checkPreconditions(resource string, obj runtime.Object, pre *metav1.Preconditions) error {
	if pre == nil {
		return nil
	}
	m, _ := meta.Accessor(obj)
	if pre.UID != nil && *pre.UID != m.GetUID() {
		return apierrors.NewConflict(groupResource(resource), m.GetName(),
			fmt.Errorf("precondition failed: UID in precondition: %s, UID in object meta: %s", *pre.UID, m.GetUID()))
	}
	if pre.ResourceVersion != nil && *pre.ResourceVersion != m.GetResourceVersion() {
		return apierrors.NewConflict(groupResource(resource), m.GetName(),
			fmt.Errorf("precondition failed: ResourceVersion in precondition: %s, ResourceVersion in object meta: %s", *pre.ResourceVersion, m.GetResourceVersion()))
	}
	return nil
}

func resourceVersion(obj runtime.Object) string {
	m, _ := meta.Accessor(obj)
	return m.GetResourceVersion()
}

// write stores obj under k at the next resourceVersion (set in obj) and keeps the
// change and tells the watches: a create without old; a delete (deleted) with obj a
// copy of old that carries the deletion's resourceVersion, as the API server's DELETED
// event does. s.mu held.
func (s *Store) write(resource string, k types.NamespacedName, old, obj runtime.Object, deleted bool) {
	s.rv++
	m, _ := meta.Accessor(obj)
	m.SetResourceVersion(strconv.FormatUint(s.rv, 10))
	c := change{rv: s.rv, resource: resource, old: old, obj: obj, typ: watch.Modified}
	switch {
	case deleted:
		delete(s.objects[resource], k)
		c.typ = watch.Deleted
	case old == nil:
		s.objects[resource][k] = obj
		c.typ = watch.Added
	default:
		s.objects[resource][k] = obj
	}
	if len(s.history) == historyLength {
		s.history = slices.Delete(s.history, 0, 1)
	}
	s.history = append(s.history, c)
	for w := range s.watchers {
		if w.resource == resource {
			w.observe(c)
		}
	}
}

// selector is a list's or watch's namespace, labels and fields.
type selector struct {
	namespace string
	labels    labels.Selector
	fields    fields.Selector
	pods      bool
}

// podFields are the field labels the API server selects pods by that evictiond uses;
// every resource has metadata.name and metadata.namespace.
var podFields = []string{"spec.nodeName"}

func newSelector(resource, namespace string, opts metav1.ListOptions) (selector, error) {
	sel := selector{namespace: namespace, labels: labels.Everything(), fields: fields.Everything(), pods: resource == "pods"}
	var err error
	if opts.LabelSelector != "" {
		if sel.labels, err = labels.Parse(opts.LabelSelector); err != nil {
			return sel, apierrors.NewBadRequest(fmt.Sprintf("labelSelector %q: %v", opts.LabelSelector, err))
		}
	}
	if opts.FieldSelector != "" {
		if sel.fields, err = fields.ParseSelector(opts.FieldSelector); err != nil {
			return sel, apierrors.NewBadRequest(fmt.Sprintf("fieldSelector %q: %v", opts.FieldSelector, err))
		}
		for _, r := range sel.fields.Requirements() {
			if r.Field != "metadata.name" && r.Field != "metadata.namespace" && !(sel.pods && slices.Contains(podFields, r.Field)) {
				return sel, apierrors.NewBadRequest(fmt.Sprintf("fieldSelector %q: field label not supported: %s (the fake API server selects %s by metadata.name, metadata.namespace%s)",
					opts.FieldSelector, r.Field, resource, map[bool]string{true: ", spec.nodeName"}[sel.pods]))
			}
		}
	}
	return sel, nil
}

func (sel selector) matches(obj runtime.Object) bool {
	m, err := meta.Accessor(obj)
	if err != nil {
		return false
	}
	if sel.namespace != "" && m.GetNamespace() != sel.namespace {
		return false
	}
	if !sel.labels.Matches(labels.Set(m.GetLabels())) {
		return false
	}
	f := fields.Set{"metadata.name": m.GetName(), "metadata.namespace": m.GetNamespace()}
	if p, ok := obj.(*corev1.Pod); ok {
		f["spec.nodeName"] = p.Spec.NodeName
	}
	return sel.fields.Matches(f)
}

// watcher is one watch: the changes it selects queue without bound (a writer never
// waits for a reader) and go out on its channel in order until Stop.
type watcher struct {
	store    *Store
	resource string
	sel      selector
	out      chan watch.Event

	mu      sync.Mutex
	wake    *sync.Cond
	queue   []watch.Event
	stopped bool
	done    chan struct{}
}

func newWatcher(s *Store, resource string, sel selector) *watcher {
	w := &watcher{store: s, resource: resource, sel: sel, out: make(chan watch.Event), done: make(chan struct{})}
	w.wake = sync.NewCond(&w.mu)
	return w
}

// observe queues c as this watch sees it: through its selectors.
func (w *watcher) observe(c change) {
	was := c.old != nil && w.sel.matches(c.old)
	is := c.typ != watch.Deleted && w.sel.matches(c.obj)
	typ := c.typ
	switch {
	case c.typ == watch.Deleted && !was:
		return
	case c.typ == watch.Modified && was && !is:
		typ = watch.Deleted
	case c.typ == watch.Modified && !was && is:
		typ = watch.Added
	case c.typ != watch.Deleted && !is:
		return
	}
	w.send(watch.Event{Type: typ, Object: c.obj.DeepCopyObject()})
}

func (w *watcher) send(e watch.Event) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.queue = append(w.queue, e)
	w.wake.Signal()
}

func (w *watcher) run() {
	defer close(w.out)
	for {
		w.mu.Lock()
		for len(w.queue) == 0 && !w.stopped {
			w.wake.Wait()
		}
		if w.stopped {
			w.mu.Unlock()
			return
		}
		e := w.queue[0]
		w.queue = w.queue[1:]
		w.mu.Unlock()
		select {
		case w.out <- e:
		case <-w.done:
			return
		}
	}
}

func (w *watcher) ResultChan() <-chan watch.Event { return w.out }

func (w *watcher) Stop() {
	w.store.mu.Lock()
	delete(w.store.watchers, w)
	w.store.mu.Unlock()
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.stopped {
		w.stopped = true
		close(w.done)
		w.wake.Signal()
	}
}
