package agent

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"

	"github.com/evictiond/evictiond/internal/brake"
	"github.com/evictiond/evictiond/internal/eviction"
	"github.com/evictiond/evictiond/internal/metrics"
	"github.com/evictiond/evictiond/internal/policy"
)

// liveNode is a node read on the real clock by the running loop: its victim
// ignores SIGTERM, so allocatable memory keeps falling at rate (bytes per
// second) from 480 MiB; pid.available is what the test sets. Every fast
// read is announced on fastReads.
type liveNode struct {
	mu        sync.Mutex
	start     time.Time
	rate      int64
	pids      int64
	fastReads chan struct{}
}

func newLiveNode(rate int64) *liveNode {
	return &liveNode{start: time.Now(), rate: rate, pids: 4000, fastReads: make(chan struct{}, 1)}
}

func (n *liveNode) read() policy.Observations {
	n.mu.Lock()
	defer n.mu.Unlock()
	now := time.Now()
	mem := max(480<<20-int64(float64(n.rate)*now.Sub(n.start).Seconds()), 0)
	return policy.Observations{
		policy.SignalAllocatableMemoryAvailable: {Available: mem, Capacity: 3 << 30, Time: now},
		policy.SignalPIDAvailable:               {Available: n.pids, Capacity: 4096, Time: now},
	}
}

func (n *liveNode) setPIDs(v int64) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.pids = v
}

func (n *liveNode) Observe(context.Context, []*v1.Pod) Observed {
	return Observed{Observations: n.read(), Pods: policy.PodStatsByUID{
		"hog": {MemoryWorkingSet: i64(3 << 30)}, "calm": {MemoryWorkingSet: i64(100 << 20)}}}
}
func (n *liveNode) ObserveUsage(context.Context, []*v1.Pod, *Observed) {}
func (n *liveNode) FastReadings() []policy.Observations                { return nil }
func (n *liveNode) LookInFlight(done <-chan struct{}, _ time.Duration) ([]policy.Observations, bool) {
	<-done
	return nil, false
}
func (n *liveNode) PodCgroupUIDs() ([]types.UID, error) { return nil, nil }
func (n *liveNode) ObserveFast() policy.Observations {
	obs := n.read()
	select {
	case n.fastReads <- struct{}{}:
	default:
	}
	return obs
}

// acceptingEvictor accepts every eviction and announces the victim.
type acceptingEvictor struct{ evicted chan string }

func (e acceptingEvictor) ReportPending(context.Context, *slog.Logger) {}
func (e acceptingEvictor) Evict(_ context.Context, c []policy.Candidate) eviction.Result {
	v := c[0]
	e.evicted <- v.Pod.Name
	return eviction.Result{Outcome: eviction.OutcomeEvicted, Victim: &v}
}

// announcedStatus announces every set of conditions the loop publishes.
type announcedStatus struct{ conds chan []v1.NodeConditionType }

func (s announcedStatus) SetConditions(c []v1.NodeConditionType, _ map[v1.NodeConditionType][]string) {
	select {
	case s.conds <- slices.Clone(c):
	default: // the test reads what it waits for; a full channel never blocks the loop
	}
}

// stuckFreezer freezes at once; its kills wait until release is closed (a
// victim whose tasks take long to go), announcing that they started.
type stuckFreezer struct {
	mu      sync.Mutex
	held    map[types.UID]brake.Hold
	frozen  map[types.UID]int // freezes per pod
	killing chan types.UID
	release chan struct{}
}

func (f *stuckFreezer) Freeze(pod *v1.Pod, max time.Duration) (brake.Hold, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.frozen == nil {
		f.frozen = map[types.UID]int{}
	}
	f.frozen[pod.UID]++
	now := time.Now()
	h := brake.Hold{UID: pod.UID, Pod: pod.Namespace + "/" + pod.Name, FrozenAt: now, Deadline: now.Add(max)}
	f.held[pod.UID] = h
	return h, nil
}

func (f *stuckFreezer) Thaw(uid types.UID) (brake.Hold, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	h, ok := f.held[uid]
	delete(f.held, uid)
	return h, ok, nil
}

func (f *stuckFreezer) Kill(uid types.UID, _ time.Duration) (brake.Hold, int, bool, error) {
	f.mu.Lock()
	h, ok := f.held[uid]
	delete(f.held, uid)
	f.mu.Unlock()
	f.killing <- uid
	<-f.release
	return h, 1, ok, nil
}

func (f *stuckFreezer) Held() []brake.Hold {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []brake.Hold
	for _, h := range f.held {
		out = append(out, h)
	}
	return out
}

// runningAgent runs the loop on the real clock until the test ends.
func runningAgent(t *testing.T, n *liveNode, fz Freezer, extra string) (wake chan struct{}, evicted chan string, conds chan []v1.NodeConditionType, rec *record.FakeRecorder) {
	t.Helper()
	cfg, errs := policy.Load([]byte("apiVersion: evictiond.io/v1alpha1\nkind: EvictionConfiguration\n" +
		"evictionHard: {allocatableMemory.available: 500Mi, pid.available: \"100\"}\n" + extra))
	if errs != nil {
		t.Fatal(errs)
	}
	wake, evicted, conds = make(chan struct{}), make(chan string, 10), make(chan []v1.NodeConditionType, 100)
	rec = record.NewFakeRecorder(100)
	a := New(cfg, Deps{Stats: n, Pods: &fakePods{pods: []*v1.Pod{pod("hog", "100Mi"), pod("calm", "1Gi")}},
		Status: announcedStatus{conds}, Evictor: acceptingEvictor{evicted}, Recorder: rec, Metrics: metrics.New(), Freezer: fz},
		Options{NodeName: "node-1", Wake: wake, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { a.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return wake, evicted, conds, rec
}

// waitFor fails the test when ch has nothing within a generous bound: the
// events below come within one pass (milliseconds), or never.
func waitFor[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(10 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
		panic("unreachable")
	}
}

// wakeUp wakes the loop, as the fast path does at a crossing; a loop that
// does not take the wake fails the test.
func wakeUp(t *testing.T, wake chan<- struct{}) {
	t.Helper()
	select {
	case wake <- struct{}{}:
	case <-time.After(10 * time.Second):
		t.Fatal("the loop did not take the wake-up")
	}
}

// waitForConditions waits until the loop publishes want among its conditions.
func waitForConditions(t *testing.T, conds <-chan []v1.NodeConditionType, want v1.NodeConditionType) {
	t.Helper()
	for {
		if slices.Contains(waitFor(t, conds, "the node condition "+string(want)), want) {
			return
		}
	}
}

// The graceful watch on a victim that ignores SIGTERM (its memory keeps
// falling for the watch's whole 2 s, and far beyond) runs beside the loop: a
// crossing during it (pid.available) is decided by its own pass at once, and
// the watch goes on after that pass. On the loop's goroutine, the crossing
// waited for the watch's end.
func TestRun_ACrossingDuringTheGracefulWatchIsDecidedAtOnce(t *testing.T) {
	n := newLiveNode(50 << 20) // 50 MiB/s: 9.6 s to go, the graceful path
	fz := newFakeFreezer()
	wake, evicted, conds, _ := runningAgent(t, n, fz, "brake: {evictionPath: 200ms}\n")
	if got := waitFor(t, evicted, "the first crossing's eviction"); got != "hog" {
		t.Fatalf("evicted %s, want hog", got)
	}
	waitFor(t, n.fastReads, "the graceful watch's reading")

	n.setPIDs(50)
	wakeUp(t, wake)
	waitForConditions(t, conds, v1.NodePIDPressure)
	// The watch still reads after the crossing's pass: it did not have to end first.
	select {
	case <-n.fastReads: // the one read before the pass, if it was not taken
	default:
	}
	waitFor(t, n.fastReads, "the graceful watch's reading after the crossing's pass")
	fz.mu.Lock()
	defer fz.mu.Unlock()
	if len(fz.log) != 0 {
		t.Errorf("freezer calls %v on a slow ramp, want none", fz.log)
	}
}

// The brake's kill of a victim whose tasks do not go (its confirmation would
// wait up to 5 s) runs beside the loop: a crossing meanwhile is decided at
// once, and the kill is recorded (the Braked Event) when it ends.
func TestRun_ACrossingDuringTheBrakesKillIsDecidedAtOnce(t *testing.T) {
	n := newLiveNode(1 << 30) // 1 GiB/s: 0.47 s to go, under 1.5 × the 1 s path
	fz := &stuckFreezer{held: map[types.UID]brake.Hold{}, killing: make(chan types.UID, 1), release: make(chan struct{})}
	var releaseOnce sync.Once
	release := func() { releaseOnce.Do(func() { close(fz.release) }) }
	wake, evicted, conds, rec := runningAgent(t, n, fz, "brake: {evictionPath: 1s}\n")
	t.Cleanup(release) // before the loop's stop, which a stuck kill would hold
	if got := waitFor(t, evicted, "the first crossing's eviction"); got != "hog" {
		t.Fatalf("evicted %s, want hog", got)
	}
	if uid := waitFor(t, fz.killing, "the brake's kill"); uid != "hog" {
		t.Fatalf("killing %s, want hog", uid)
	}

	n.setPIDs(50)
	wakeUp(t, wake)
	waitForConditions(t, conds, v1.NodePIDPressure)
	// The memory signal is still crossed and the hog still pending: a pass
	// must not freeze it again while its kill is in flight (a cgroup v1 freeze
	// would hold the SIGKILLed tasks, and the kill would fail).
	fz.mu.Lock()
	freezes := fz.frozen["hog"]
	fz.mu.Unlock()
	if freezes != 1 {
		t.Errorf("hog frozen %d times, want once: frozen again while its kill was in flight", freezes)
	}

	release()
	for {
		if e := waitFor(t, rec.Events, "the Braked Event"); strings.Contains(e, EventReasonBraked+" ") {
			return
		}
	}
}
