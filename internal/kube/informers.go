package kube

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
)

// NodeInformers are Pod and Node caches that hold only this node's objects: the list and
// watch requests carry field selectors (spec.nodeName for pods, metadata.name for the
// node), so each agent's API load and memory depend on its own node, never on the size
// of the cluster.
//
// Each cache is client-go's Reflector filling an indexer, but evictiond runs the
// list-and-watch loop itself (nodeCache.run) instead of a shared informer's. An
// informer's loop backs off exponentially from 0.8 s to a 30 s cap with a jitter of
// 1.0 (waits of up to 60 s) and resets only after two minutes without a failure: API
// server restarts a minute or so apart (an upgrade, a crash loop, the soak's cycles) each
// added steps, and after the second one the agent's pod cache stayed blind for
// 30-60 s while the API server answered again. A pod created then (the memory hog of
// make soak's fourth cycle) was not among the loop's pods, and under a hard threshold the
// loop found nothing to evict. Here a connection refused or a 429 ends the reflector's
// attempt instead of its internal backoff, and the loop retries with cacheBackoff (0.5 s
// doubling to 5 s, reset once a list-and-watch lasted 30 s): after an outage the cache is
// listed again within about 5 s of the API server answering, however many outages came
// before.
type NodeInformers struct {
	NodeName string
	Pods     corelisters.PodLister
	Node     corelisters.NodeLister
	// Logger receives the caches' losses and recoveries of the API server; nil:
	// slog.Default(). Set before Start.
	Logger *slog.Logger

	client Interface
	pods   *nodeCache
	node   *nodeCache

	freshMu   sync.Mutex
	lastFresh time.Time
	freshPods []*corev1.Pod
	freshErr  error
}

// cacheBackoff is the wait between two list-and-watch attempts of a node cache.
// Connection refused costs a dead API server nothing; a fleet re-listing after a restart
// lists one node's pods per agent, from the watch cache, at most every 5 s per agent.
var cacheBackoff = wait.Backoff{Duration: 500 * time.Millisecond, Factor: 2, Jitter: 0.5, Steps: 1 << 30, Cap: 5 * time.Second}

// cacheHealthyRun: a list-and-watch that lasted this long starts the backoff again from
// its first step when it ends.
const cacheHealthyRun = 30 * time.Second

// NewNodeInformers builds (but does not start) the node-scoped caches. They never resync
// (handlers react to watch events and periodic checks read the cache).
func NewNodeInformers(client Interface, nodeName string) (*NodeInformers, error) {
	if nodeName == "" {
		return nil, fmt.Errorf("node name: value %q: must not be empty", nodeName)
	}
	n := &NodeInformers{NodeName: nodeName, client: client}
	podSelector := fields.OneTermEqualSelector("spec.nodeName", nodeName).String()
	n.pods = newNodeCache("pods", &corev1.Pod{}, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc},
		listWatch(client, podSelector,
			func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
				return client.CoreV1().Pods(metav1.NamespaceAll).List(ctx, o)
			},
			func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
				return client.CoreV1().Pods(metav1.NamespaceAll).Watch(ctx, o)
			}))
	nodeSelector := fields.OneTermEqualSelector("metadata.name", nodeName).String()
	n.node = newNodeCache("node", &corev1.Node{}, cache.Indexers{},
		listWatch(client, nodeSelector,
			func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
				return client.CoreV1().Nodes().List(ctx, o)
			},
			func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
				return client.CoreV1().Nodes().Watch(ctx, o)
			}))
	n.Pods = corelisters.NewPodLister(n.pods.indexer)
	n.Node = corelisters.NewNodeLister(n.node.indexer)
	return n, nil
}

// listWatch is a field-selected ListerWatcher whose watch hands the reflector a connection
// refused or a 429 as a plain error: the reflector then returns from ListAndWatch (and
// nodeCache.run waits its own backoff) instead of waiting its internal one.
func listWatch(client Interface, selector string,
	list func(context.Context, metav1.ListOptions) (runtime.Object, error),
	watchFn func(context.Context, metav1.ListOptions) (watch.Interface, error)) cache.ListerWatcher {
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = selector
			return list(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = selector
			w, err := watchFn(ctx, o)
			if err != nil && (utilnet.IsConnectionRefused(err) || apierrors.IsTooManyRequests(err)) {
				return nil, &watchRefused{msg: err.Error()}
			}
			return w, err
		},
	}
	return cache.ToListWatcherWithWatchListSemantics(lw, client)
}

// watchRefused is a watch the API server refused (connection refused, 429), stripped of
// what makes client-go's reflector retry it with its own backoff.
type watchRefused struct{ msg string }

func (e *watchRefused) Error() string { return "watch: " + e.msg }

// stripManagedFields drops metadata.managedFields before an object enters the cache:
// evictiond never reads them, and they are often the largest part of a pod or node.
func stripManagedFields(obj any) any {
	if accessor, err := meta.Accessor(obj); err == nil {
		accessor.SetManagedFields(nil)
	}
	return obj
}

// AddNodeHandler registers a handler for changes of the node object; call before Start.
// Handlers run in the cache's goroutine and must not block.
func (n *NodeInformers) AddNodeHandler(h cache.ResourceEventHandler) error {
	return n.node.addHandler(h)
}

// AddPodHandler registers a handler for changes of this node's pods; call before Start.
// Handlers run in the cache's goroutine and must not block.
func (n *NodeInformers) AddPodHandler(h cache.ResourceEventHandler) error {
	return n.pods.addHandler(h)
}

// Start runs the caches until ctx ends and waits for their first list.
func (n *NodeInformers) Start(ctx context.Context) error {
	log := n.Logger
	if log == nil {
		log = slog.Default()
	}
	for _, c := range []*nodeCache{n.pods, n.node} {
		go c.run(ctx, log.With("cache", c.what, "node", n.NodeName))
	}
	for _, c := range []*nodeCache{n.pods, n.node} {
		select {
		case <-c.synced:
		case <-ctx.Done():
			return fmt.Errorf("waiting for the pod and node caches of node %s to sync: %w", n.NodeName, ctx.Err())
		}
	}
	return nil
}

// Shutdown waits for the caches' goroutines to end after ctx passed to Start is done.
func (n *NodeInformers) Shutdown() {
	for _, c := range []*nodeCache{n.pods, n.node} {
		c.wait()
	}
}

// ListPods lists this node's pods from the cache (the loop's agent.Pods). Start
// waited for the first sync, so an empty list is a node without pods.
func (n *NodeInformers) ListPods() ([]*corev1.Pod, error) {
	return n.Pods.List(labels.Everything())
}

// directListInterval: ListPodsDirect asks the API server at most this often and
// answers from its last list in between.
const directListInterval = 10 * time.Second

// ListPodsDirect lists this node's pods from the API server itself (a consistent
// read), bypassing the cache: the loop's remedy when the cache is found behind the node
// (agent.Pods.ListPodsDirect). At most one request per directListInterval; calls in between get
// the last answer.
func (n *NodeInformers) ListPodsDirect(ctx context.Context) ([]*corev1.Pod, error) {
	n.freshMu.Lock()
	defer n.freshMu.Unlock()
	if !n.lastFresh.IsZero() && time.Since(n.lastFresh) < directListInterval {
		return n.freshPods, n.freshErr
	}
	n.lastFresh = time.Now()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	list, err := n.client.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("spec.nodeName", n.NodeName).String()})
	if err != nil {
		n.freshPods, n.freshErr = nil, fmt.Errorf("listing the pods of node %s: %w", n.NodeName, err)
		return nil, n.freshErr
	}
	pods := make([]*corev1.Pod, 0, len(list.Items))
	for i := range list.Items {
		p := &list.Items[i]
		p.ManagedFields = nil
		pods = append(pods, p)
	}
	n.freshPods, n.freshErr = pods, nil
	return pods, nil
}

// nodeCache is one node-scoped cache: a reflector listing and watching into indexer,
// run by run's loop.
type nodeCache struct {
	what      string
	indexer   cache.Indexer
	reflector *cache.Reflector
	backoff   wait.Backoff

	mu           sync.Mutex
	handlers     []cache.ResourceEventHandler
	started      bool
	synced       chan struct{}
	syncOnce     sync.Once
	failingSince time.Time // the first failed attempt since the last list
	lastErr      error
	log          *slog.Logger
	done         chan struct{}
	runOnce      sync.Once
}

func newNodeCache(what string, obj runtime.Object, indexers cache.Indexers, lw cache.ListerWatcher) *nodeCache {
	c := &nodeCache{
		what:    what,
		indexer: cache.NewIndexer(cache.DeletionHandlingMetaNamespaceKeyFunc, indexers),
		backoff: cacheBackoff,
		synced:  make(chan struct{}),
		done:    make(chan struct{}),
	}
	c.reflector = cache.NewReflectorWithOptions(lw, obj, c, cache.ReflectorOptions{Name: "evictiond " + what})
	return c
}

func (c *nodeCache) addHandler(h cache.ResourceEventHandler) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.started {
		return fmt.Errorf("adding a %s event handler: the cache already started", c.what)
	}
	c.handlers = append(c.handlers, h)
	return nil
}

// run lists and watches until ctx ends: after each end of the reflector's
// list-and-watch (an error, an expired resource version, a watch the server ended
// with an error) it waits one step of its own backoff and lists again.
func (c *nodeCache) run(ctx context.Context, log *slog.Logger) {
	c.mu.Lock()
	c.started, c.log = true, log
	c.mu.Unlock()
	ran := false
	c.runOnce.Do(func() { ran = true })
	if !ran {
		return
	}
	defer close(c.done)
	b := c.backoff
	for {
		began := time.Now()
		err := c.reflector.ListAndWatchWithContext(ctx)
		if ctx.Err() != nil {
			return
		}
		if time.Since(began) >= cacheHealthyRun {
			b = c.backoff
		}
		wait := b.Step()
		if err != nil {
			c.noteFailure(log, err, wait)
		} else {
			log.Debug("node cache: watch ended; listing again", "in", wait)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// noteFailure logs the first failure of an outage at Warn and the repeats at Debug.
func (c *nodeCache) noteFailure(log *slog.Logger, err error, retryIn time.Duration) {
	c.mu.Lock()
	first := c.failingSince.IsZero()
	if first {
		c.failingSince = time.Now()
	}
	c.lastErr = err
	c.mu.Unlock()
	level := slog.LevelDebug
	if first {
		level = slog.LevelWarn
	}
	log.Log(context.Background(), level, "node cache: list and watch failed; retrying", "retryIn", retryIn.Round(time.Millisecond), "err", err)
}

// wait waits for run to end (at once if it never started).
func (c *nodeCache) wait() {
	c.runOnce.Do(func() { close(c.done) })
	<-c.done
}

// The reflector's store: the indexer, managed fields stripped, handlers told.

func (c *nodeCache) Add(obj any) error {
	obj = stripManagedFields(obj)
	if err := c.indexer.Add(obj); err != nil {
		return err
	}
	for _, h := range c.handlers {
		h.OnAdd(obj, false)
	}
	return nil
}

func (c *nodeCache) Update(obj any) error {
	obj = stripManagedFields(obj)
	old, exists, err := c.indexer.Get(obj)
	if err != nil {
		return err
	}
	if err := c.indexer.Update(obj); err != nil {
		return err
	}
	for _, h := range c.handlers {
		if exists {
			h.OnUpdate(old, obj)
		} else {
			h.OnAdd(obj, false)
		}
	}
	return nil
}

func (c *nodeCache) Delete(obj any) error {
	if err := c.indexer.Delete(obj); err != nil {
		return err
	}
	for _, h := range c.handlers {
		h.OnDelete(obj)
	}
	return nil
}

// Replace takes a full list: the first sync, or a list again after an interruption
// (logged with how long the cache could not list).
func (c *nodeCache) Replace(list []any, resourceVersion string) error {
	for i := range list {
		list[i] = stripManagedFields(list[i])
	}
	var before map[string]any
	if len(c.handlers) > 0 {
		before = map[string]any{}
		for _, o := range c.indexer.List() {
			if k, err := cache.DeletionHandlingMetaNamespaceKeyFunc(o); err == nil {
				before[k] = o
			}
		}
	}
	if err := c.indexer.Replace(list, resourceVersion); err != nil {
		return err
	}
	initial := false
	c.syncOnce.Do(func() { initial = true; close(c.synced) })
	for _, o := range list {
		k, err := cache.DeletionHandlingMetaNamespaceKeyFunc(o)
		if err != nil {
			continue
		}
		old, existed := before[k]
		delete(before, k)
		for _, h := range c.handlers {
			if existed {
				h.OnUpdate(old, o)
			} else {
				h.OnAdd(o, initial)
			}
		}
	}
	for k, o := range before {
		for _, h := range c.handlers {
			h.OnDelete(cache.DeletedFinalStateUnknown{Key: k, Obj: o})
		}
	}
	c.mu.Lock()
	since, lastErr, log := c.failingSince, c.lastErr, c.log
	c.failingSince, c.lastErr = time.Time{}, nil
	c.mu.Unlock()
	if !since.IsZero() && log != nil {
		log.Info("node cache listed again", "unlistedFor", time.Since(since).Round(time.Millisecond), "lastErr", errString(lastErr), "objects", len(list))
	}
	return nil
}

func (c *nodeCache) Resync() error { return nil }

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
