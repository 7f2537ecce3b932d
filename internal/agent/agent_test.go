package agent

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"

	"github.com/evictiond/evictiond/internal/eviction"
	"github.com/evictiond/evictiond/internal/metrics"
	"github.com/evictiond/evictiond/internal/policy"
)

// Fakes for the loop's collaborators: this is a unit test of the loop's
// sequencing; the collaborators are proven against real components in their
// own packages.

type fakeClock struct{ now time.Time }

func (c *fakeClock) Now() time.Time { return c.now }

type fakeStats struct {
	clock *fakeClock
	obs   policy.Observations
	pods  policy.PodStatsByUID
	calls int
	// afterReclaim replaces obs once reclaim ran.
	afterReclaim policy.Observations
}

func (s *fakeStats) Observe(ctx context.Context, pods []*v1.Pod) Observed {
	s.calls++
	out := policy.Observations{}
	for k, o := range s.obs {
		o.Time = s.clock.now
		out[k] = o
	}
	return Observed{Observations: out, Pods: s.pods}
}

func (s *fakeStats) ObserveUsage(ctx context.Context, pods []*v1.Pod, obs *Observed) {}

// ObserveFast reads everything again (a node without a separate fast read).
func (s *fakeStats) ObserveFast() policy.Observations {
	return s.Observe(context.Background(), nil).Observations
}

func (s *fakeStats) FastReadings() []policy.Observations { return nil }
func (s *fakeStats) LookInFlight(done <-chan struct{}, _ time.Duration) ([]policy.Observations, bool) {
	<-done
	return nil, false
}

func (s *fakeStats) PodCgroupUIDs() ([]types.UID, error) { return nil, nil }

type fakePods struct{ pods []*v1.Pod }

func (p *fakePods) ListPods() ([]*v1.Pod, error) { return p.pods, nil }

func (p *fakePods) ListPodsDirect(context.Context) ([]*v1.Pod, error) { return p.pods, nil }

type fakeStatus struct {
	last   []v1.NodeConditionType
	causes map[v1.NodeConditionType][]string
}

func (s *fakeStatus) SetConditions(c []v1.NodeConditionType, causes map[v1.NodeConditionType][]string) {
	s.last, s.causes = c, causes
}

type fakeEvictor struct {
	calls   [][]policy.Candidate
	outcome eviction.Outcome
}

func (e *fakeEvictor) ReportPending(context.Context, *slog.Logger) {}

func (e *fakeEvictor) Evict(ctx context.Context, c []policy.Candidate) eviction.Result {
	e.calls = append(e.calls, c)
	v := c[0]
	return eviction.Result{Outcome: e.outcome, Victim: &v}
}

type fakeReclaimer struct {
	steps []policy.ReclaimStep
	stats *fakeStats
	freed int64
}

func (r *fakeReclaimer) Reclaim(ctx context.Context, step policy.ReclaimStep, sig policy.Signal, need int64, live []*v1.Pod) eviction.ReclaimResult {
	r.steps = append(r.steps, step)
	if r.stats.afterReclaim != nil {
		r.stats.obs = r.stats.afterReclaim
	}
	return eviction.ReclaimResult{Freed: r.freed, Items: 1}
}

func pod(name string, memReq string) *v1.Pod {
	p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID(name)},
		Spec: v1.PodSpec{NodeName: "node-1", Containers: []v1.Container{{Name: "c"}}}}
	if memReq != "" {
		p.Spec.Containers[0].Resources.Requests = v1.ResourceList{v1.ResourceMemory: resource.MustParse(memReq)}
	}
	return p
}

func i64(v int64) *int64 { return &v }

func newTestAgent(t *testing.T, yaml string) (*Agent, *fakeClock, *fakeStats, *fakeEvictor, *fakeStatus, *record.FakeRecorder) {
	t.Helper()
	cfg, errs := policy.Load([]byte("apiVersion: evictiond.io/v1alpha1\nkind: EvictionConfiguration\n" + yaml))
	if errs != nil {
		t.Fatal(errs)
	}
	clock := &fakeClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	stats := &fakeStats{clock: clock, pods: policy.PodStatsByUID{
		"hog":  {MemoryWorkingSet: i64(3 << 30)},
		"calm": {MemoryWorkingSet: i64(100 << 20)},
	}}
	ev := &fakeEvictor{outcome: eviction.OutcomeEvicted}
	st := &fakeStatus{}
	rec := record.NewFakeRecorder(100)
	a := New(cfg, Deps{Stats: stats, Pods: &fakePods{pods: []*v1.Pod{pod("hog", "100Mi"), pod("calm", "1Gi")}},
		Status: st, Evictor: ev, Recorder: rec, Metrics: metrics.New()},
		Options{NodeName: "node-1", Clock: clock, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	return a, clock, stats, ev, st, rec
}

func TestPass_HardMemoryPressureEvictsTheRankedFirstPodOnceAndWaits(t *testing.T) {
	a, clock, stats, ev, st, _ := newTestAgent(t, "evictionHard: {memory.available: 500Mi}\n")
	stats.obs = policy.Observations{policy.SignalMemoryAvailable: {Available: 400 << 20, Capacity: 8 << 30}}
	a.pass(context.Background(), "test")
	if len(ev.calls) != 1 || ev.calls[0][0].Pod.Name != "hog" {
		t.Fatalf("evictor calls %v, want one with hog first", ev.calls)
	}
	if len(st.last) != 1 || st.last[0] != v1.NodeMemoryPressure {
		t.Fatalf("conditions %v, want [MemoryPressure]", st.last)
	}
	// Next pass, pressure unchanged, hog still terminating: no second victim.
	clock.now = clock.now.Add(time.Second)
	a.pass(context.Background(), "test")
	if len(ev.calls) != 1 {
		t.Fatalf("a second eviction was attempted while the first victim terminates: %d calls", len(ev.calls))
	}
}

func TestPass_NoPressureNoEvictionNoConditions(t *testing.T) {
	a, _, stats, ev, st, rec := newTestAgent(t, "evictionHard: {memory.available: 500Mi}\n")
	stats.obs = policy.Observations{policy.SignalMemoryAvailable: {Available: 4 << 30, Capacity: 8 << 30}}
	a.pass(context.Background(), "test")
	if len(ev.calls) != 0 || len(st.last) != 0 || len(rec.Events) != 0 {
		t.Fatalf("quiet node: %d evictions, conditions %v, %d events", len(ev.calls), st.last, len(rec.Events))
	}
}

func TestPass_NodeReclaimThatSufficesEvictsNobody(t *testing.T) {
	a, _, stats, ev, _, rec := newTestAgent(t, "evictionHard: {nodefs.available: 10%}\n")
	stats.obs = policy.Observations{policy.SignalNodeFsAvailable: {Available: 5 << 30, Capacity: 100 << 30}}
	stats.afterReclaim = policy.Observations{policy.SignalNodeFsAvailable: {Available: 30 << 30, Capacity: 100 << 30}}
	r := &fakeReclaimer{stats: stats, freed: 25 << 30}
	a.reclaim = r
	a.pass(context.Background(), "test")
	if len(ev.calls) != 0 {
		t.Fatalf("evicted although reclaim sufficed")
	}
	if len(r.steps) != 1 || r.steps[0] != policy.ReclaimContainerGC {
		t.Fatalf("reclaim steps %v, want containerGC only (its gain met the need)", r.steps)
	}
	if !eventsContain(rec, "NodeReclaim") {
		t.Fatalf("no NodeReclaim event")
	}
}

func TestPass_NodeReclaimThatFallsShortEvicts(t *testing.T) {
	a, _, stats, ev, _, _ := newTestAgent(t, "evictionHard: {nodefs.available: 10%}\n")
	stats.obs = policy.Observations{policy.SignalNodeFsAvailable: {Available: 5 << 30, Capacity: 100 << 30}}
	r := &fakeReclaimer{stats: stats, freed: 0}
	a.reclaim = r
	a.pass(context.Background(), "test")
	if got := len(r.steps); got != 3 {
		t.Fatalf("reclaim ran %d steps (%v), want all 3 of the single-filesystem layout", got, r.steps)
	}
	if len(ev.calls) != 1 {
		t.Fatalf("no eviction after insufficient reclaim")
	}
}

func TestPass_DryRunRecordsWouldEvictAndDoesNotWait(t *testing.T) {
	a, _, stats, ev, _, rec := newTestAgent(t, "evictionHard: {memory.available: 500Mi}\ndryRun: true\n")
	ev.outcome = eviction.OutcomeDryRun
	stats.obs = policy.Observations{policy.SignalMemoryAvailable: {Available: 400 << 20, Capacity: 8 << 30}}
	a.pass(context.Background(), "test")
	if !eventsContain(rec, "WouldEvict") {
		t.Fatalf("dry run recorded no WouldEvict event")
	}
	if len(a.engine.Pending()) != 0 {
		t.Fatalf("dry run left a pending eviction: %v", a.engine.Pending())
	}
}

func TestReload_AppliesNewThresholdsInTheLoop(t *testing.T) {
	a, clock, stats, ev, _, _ := newTestAgent(t, "evictionHard: {memory.available: 100Mi}\n")
	stats.obs = policy.Observations{policy.SignalMemoryAvailable: {Available: 400 << 20, Capacity: 8 << 30}}
	a.pass(context.Background(), "test")
	if len(ev.calls) != 0 {
		t.Fatal("evicted below no threshold")
	}
	cfg, _ := policy.Load([]byte("apiVersion: evictiond.io/v1alpha1\nkind: EvictionConfiguration\nevictionHard: {memory.available: 1Gi}\n"))
	a.Reload(cfg)
	a.applyConfig(<-a.reloads)
	clock.now = clock.now.Add(time.Second) // a fresh reading: the stale-stats guard holds otherwise
	a.pass(context.Background(), "test")
	if len(ev.calls) != 1 {
		t.Fatal("new threshold not applied")
	}
}

func eventsContain(rec *record.FakeRecorder, reason string) bool {
	for {
		select {
		case e := <-rec.Events:
			if strings.Contains(e, reason) {
				return true
			}
		default:
			return false
		}
	}
}

func TestHeldBackLogsAtLevelOncePerReasonThenDebug(t *testing.T) {
	var buf strings.Builder
	a := &Agent{log: slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))}
	a.heldBack(slog.LevelInfo, "no eviction this pass", "why", "waiting for ns/a to terminate (evicted 1.2s ago)")
	a.heldBack(slog.LevelInfo, "no eviction this pass", "why", "waiting for ns/a to terminate (evicted 2.4s ago)")
	a.heldBack(slog.LevelWarn, "unable to evict any pods from the node", "why", "owned by a DaemonSet: 2")
	got := strings.Split(strings.TrimSpace(buf.String()), "\n")
	want := []string{"level=INFO", "level=DEBUG", "level=WARN"}
	if len(got) != len(want) {
		t.Fatalf("%d lines, want %d:\n%s", len(got), len(want), buf.String())
	}
	for i := range want {
		if !strings.Contains(got[i], want[i]) {
			t.Errorf("line %d = %q, want %s (same reason with other elapsed times is not a change)", i, got[i], want[i])
		}
	}
}

func TestExcludedSummaryCountsByReasonInOrder(t *testing.T) {
	ex := []policy.ExcludedPod{{Reason: "owned by a DaemonSet"}, {Reason: "evictiond's own pod"}, {Reason: "owned by a DaemonSet"}}
	if got, want := excludedSummary(ex), "owned by a DaemonSet: 2; evictiond's own pod: 1"; got != want {
		t.Errorf("excludedSummary = %q, want %q", got, want)
	}
	if got := excludedSummary(nil); got != "no pods on the node" {
		t.Errorf("excludedSummary(nil) = %q", got)
	}
}

// A reading hovering at the threshold crosses it and back on every pass: the
// EvictionThresholdMet Event is recorded once for the episode, and again only
// after the condition was released (transition period) and pressure returned.
func TestPass_ThresholdMetEventOncePerEpisodeNotPerCrossing(t *testing.T) {
	a, clock, stats, _, _, rec := newTestAgent(t, "evictionHard: {memory.available: 500Mi}\nevictionPressureTransitionPeriod: 10s\n")
	under := policy.Observations{policy.SignalMemoryAvailable: {Available: 400 << 20, Capacity: 8 << 30}}
	over := policy.Observations{policy.SignalMemoryAvailable: {Available: 4 << 30, Capacity: 8 << 30}}
	thresholdMet := func() int {
		n := 0
		for {
			select {
			case e := <-rec.Events:
				if strings.Contains(e, "EvictionThresholdMet") {
					n++
				}
			default:
				return n
			}
		}
	}
	for i := range 8 { // 8 s of flapping, within the transition period
		stats.obs = under
		if i%2 == 1 {
			stats.obs = over
		}
		clock.now = clock.now.Add(time.Second)
		a.pass(context.Background(), "test")
	}
	if n := thresholdMet(); n != 1 {
		t.Fatalf("EvictionThresholdMet Events while the reading flapped: %d, want 1", n)
	}
	stats.obs = over
	for range 12 { // the condition is released after 10 s without pressure
		clock.now = clock.now.Add(time.Second)
		a.pass(context.Background(), "test")
	}
	stats.obs = under
	clock.now = clock.now.Add(time.Second)
	a.pass(context.Background(), "test")
	if n := thresholdMet(); n != 1 {
		t.Fatalf("EvictionThresholdMet Events for a new episode after the release: %d, want 1", n)
	}
}

func TestPass_AVictimHeldBackByTheEvictorIsNotAwaited(t *testing.T) {
	a, clock, stats, ev, _, _ := newTestAgent(t, "evictionHard: {memory.available: 500Mi}\n")
	ev.outcome = eviction.OutcomeCoolingDown
	stats.obs = policy.Observations{policy.SignalMemoryAvailable: {Available: 400 << 20, Capacity: 8 << 30}}
	rep := a.Pass(context.Background(), "test")
	if len(rep.Evictions) != 1 || rep.Evictions[0].Outcome != eviction.OutcomeCoolingDown || len(rep.Pending) != 0 {
		t.Fatalf("evictions %+v pending %v; want one cooling_down answer and nothing pending", rep.Evictions, rep.Pending)
	}
	ev.outcome = eviction.OutcomeEvicted
	clock.now = clock.now.Add(time.Second)
	rep = a.Pass(context.Background(), "test")
	if len(ev.calls) != 2 || len(rep.Pending) != 1 || rep.Pending[0] != "ns/hog" {
		t.Fatalf("calls %d pending %v; want a second try and ns/hog awaited", len(ev.calls), rep.Pending)
	}
}

func TestPass_LocalStorageViolatorsUpToMaxPerPass(t *testing.T) {
	a, _, stats, ev, _, _ := newTestAgent(t, "evictionHard: {nodefs.available: 10%}\neviction: {rateLimits: {maxPerPass: 1}}\n")
	stats.obs = policy.Observations{policy.SignalNodeFsAvailable: {Available: 50 << 30, Capacity: 100 << 30}}
	var pods []*v1.Pod
	for _, name := range []string{"a", "b"} {
		p := pod(name, "")
		p.Spec.Volumes = []v1.Volume{{Name: "v", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{SizeLimit: ptrQuantity("1Gi")}}}}
		pods = append(pods, p)
		stats.pods[p.UID] = policy.PodStats{Volumes: map[string]policy.VolumeStats{"v": {UsedBytes: i64(2 << 30)}}}
	}
	a.pods = &fakePods{pods: pods}
	rep := a.Pass(context.Background(), "test")
	if len(ev.calls) != 1 || len(rep.Evictions) != 1 || rep.Deferred != 1 {
		t.Fatalf("evictor calls %d, evictions %d, deferred %d; want one evicted and one deferred (maxPerPass 1)", len(ev.calls), len(rep.Evictions), rep.Deferred)
	}
}

func ptrQuantity(s string) *resource.Quantity { q := resource.MustParse(s); return &q }
