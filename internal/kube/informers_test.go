package kube_test

import (
	"bytes"
	"context"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"log/slog"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	"github.com/evictiond/evictiond/internal/kube"
	"github.com/evictiond/evictiond/internal/kube/kubefake"
)

// refused is what a dial to a stopped API server returns.
var refused = &net.OpError{Op: "dial", Net: "tcp", Err: &os.SyscallError{Syscall: "connect", Err: syscall.ECONNREFUSED}}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func testPod(name string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: types.UID("uid-" + name),
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "test"}}},
		Spec: corev1.PodSpec{NodeName: "n1"},
	}
}

// outage makes every pod list and watch fail with connection refused while down is
// set, as a stopped API server does, and counts the attempts.
type outage struct {
	down     atomic.Bool
	attempts atomic.Int32 // lists and watches

	mu   sync.Mutex
	open []watch.Interface
}

func (o *outage) install(c *kubefake.Clientset) {
	c.OnWatch("pods", func(a kubefake.Action) (bool, watch.Interface, error) {
		o.attempts.Add(1)
		if o.down.Load() {
			return true, nil, refused
		}
		w, err := c.Store().Watch("pods", a.Namespace, a.ListOptions)
		if err != nil {
			return true, nil, err
		}
		o.mu.Lock()
		o.open = append(o.open, w)
		o.mu.Unlock()
		return true, w, nil
	})
	c.OnCall("list", "pods", func(kubefake.Action) (bool, runtime.Object, error) {
		o.attempts.Add(1)
		if o.down.Load() {
			return true, nil, refused
		}
		return false, nil, nil
	})
}

// stop takes the API server away: open watches end (as a closed connection ends
// them) and every request is refused until start.
func (o *outage) stop() {
	o.down.Store(true)
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, w := range o.open {
		w.Stop()
	}
	o.open = nil
}

func (o *outage) start() { o.down.Store(false) }

func newFake(t *testing.T, objs ...runtime.Object) *kubefake.Clientset {
	t.Helper()
	c, err := kubefake.NewClientset(objs...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func startInformers(t *testing.T, c *kubefake.Clientset, log *slog.Logger) (*kube.NodeInformers, context.CancelFunc) {
	t.Helper()
	n, err := kube.NewNodeInformers(c, "n1")
	if err != nil {
		t.Fatal(err)
	}
	n.Logger = log
	kube.SetCacheBackoff(n, wait.Backoff{Duration: 10 * time.Millisecond, Factor: 2, Jitter: 0.5, Steps: 1 << 30, Cap: 40 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	if err := n.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); n.Shutdown() })
	return n, cancel
}

func waitPods(t *testing.T, n *kube.NodeInformers, what string, want func([]*corev1.Pod) bool, timeout time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		pods, err := n.ListPods()
		if err != nil {
			t.Fatal(err)
		}
		if want(pods) {
			return time.Since(start)
		}
		if time.Since(start) > timeout {
			t.Fatalf("%s: not within %v; cache holds %d pods", what, timeout, len(pods))
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func hasPod(name string) func([]*corev1.Pod) bool {
	return func(pods []*corev1.Pod) bool {
		for _, p := range pods {
			if p.Name == name {
				return true
			}
		}
		return false
	}
}

// Outages one after the other must not make the cache slower to come back: client-go's
// informer loop waited 0.8 s, 1.6 s, 3.2 s, 6.4 s... (up to 60 s) and kept those steps
// for two minutes, so a pod created after the third outage stayed unseen for seconds to
// a minute. Here the reflector's internal backoff is never used (the refused watch ends
// its attempt) and the cache's own backoff is the test's 10-40 ms.
func TestNodeCacheSeesPodsSoonAfterRepeatedOutages(t *testing.T) {
	c := newFake(t, testPod("a"))
	o := &outage{}
	o.install(c)
	logs := &lockedBuffer{}
	n, _ := startInformers(t, c, slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
	waitPods(t, n, "pod a after the first list", hasPod("a"), 5*time.Second)
	for i, name := range []string{"b", "c", "d", "e"} {
		// The API server goes away: end the open watch (as a closed connection
		// does) and refuse everything for a while.
		// A watch that lasted over a second ends without an error: client-go's
		// reflector then opens the next one itself and, refused, would wait its
		// internal backoff (0.8 s, 1.6 s, 3.2 s, ...) between attempts.
		time.Sleep(1200 * time.Millisecond)
		before := o.attempts.Load()
		o.stop()
		deadline := time.Now().Add(5 * time.Second)
		for o.attempts.Load() < before+5 && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
		if got := o.attempts.Load() - before; got < 5 {
			t.Fatalf("outage %d: %d list and watch attempts in 5 s; want the cache to retry at its own backoff (10-40 ms)", i+1, got)
		}
		o.start()
		if err := c.Store().Add(testPod(name)); err != nil {
			t.Fatal(err)
		}
		took := waitPods(t, n, "pod "+name+" created after outage", hasPod(name), 2*time.Second)
		t.Logf("outage %d: pod %s in the cache %v after the API server answered again", i+1, name, took.Round(time.Millisecond))
	}
	for _, p := range mustList(t, n) {
		if p.ManagedFields != nil {
			t.Errorf("pod %s kept its managedFields in the cache", p.Name)
		}
	}
	if l := logs.String(); !strings.Contains(l, "node cache: list and watch failed; retrying") || !strings.Contains(l, "node cache listed again") {
		t.Errorf("the outages and recoveries are not in the log:\n%s", l)
	}
}

// A pod deleted while the cache could not watch leaves the cache at the next list (no
// ghost candidate), and handlers hear of it.
func TestNodeCacheDropsPodsDeletedDuringAnOutage(t *testing.T) {
	c := newFake(t, testPod("a"), testPod("b"))
	o := &outage{}
	o.install(c)
	n, err := kube.NewNodeInformers(c, "n1")
	if err != nil {
		t.Fatal(err)
	}
	kube.SetCacheBackoff(n, wait.Backoff{Duration: 10 * time.Millisecond, Factor: 2, Steps: 1 << 30, Cap: 40 * time.Millisecond})
	var mu sync.Mutex
	var added, deleted []string
	name := func(obj any) string {
		if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = d.Obj
		}
		return obj.(*corev1.Pod).Name
	}
	if err := n.AddPodHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { mu.Lock(); added = append(added, name(obj)); mu.Unlock() },
		DeleteFunc: func(obj any) { mu.Lock(); deleted = append(deleted, name(obj)); mu.Unlock() },
	}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer func() { cancel(); n.Shutdown() }()
	if err := n.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := n.AddPodHandler(cache.ResourceEventHandlerFuncs{}); err == nil {
		t.Error("AddPodHandler after Start: no error")
	}
	waitPods(t, n, "pods a and b", func(p []*corev1.Pod) bool { return len(p) == 2 }, 5*time.Second)

	before := o.attempts.Load()
	o.stop()
	// The cache has seen the outage once it retries and is refused.
	for deadline := time.Now().Add(5 * time.Second); o.attempts.Load() == before; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the cache did not retry within 5 s of its watch ending")
		}
	}
	// Deleted behind the cache's back: the store has no watcher to tell.
	if err := c.Store().Delete("pods", "default", "b"); err != nil {
		t.Fatal(err)
	}
	o.start()
	waitPods(t, n, "pod b gone", func(p []*corev1.Pod) bool { return len(p) == 1 && p[0].Name == "a" }, 2*time.Second)
	mu.Lock()
	defer mu.Unlock()
	if strings.Join(deleted, ",") != "b" {
		t.Errorf("handlers told of deletions %v; want [b]", deleted)
	}
	if len(added) < 2 {
		t.Errorf("handlers told of additions %v; want a and b", added)
	}
}

func mustList(t *testing.T, n *kube.NodeInformers) []*corev1.Pod {
	t.Helper()
	pods, err := n.ListPods()
	if err != nil {
		t.Fatal(err)
	}
	return pods
}
