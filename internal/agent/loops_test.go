package agent

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"

	"github.com/evictiond/evictiond/internal/metrics"
	"github.com/evictiond/evictiond/internal/policy"
)

// fakeOwners answers every Deployment with one UID.
type fakeOwners struct{ asked []policy.Workload }

func (o *fakeOwners) Reference(_ context.Context, w policy.Workload) (*v1.ObjectReference, error) {
	o.asked = append(o.asked, w)
	return &v1.ObjectReference{Kind: w.Kind, Namespace: w.Namespace, Name: w.Name, UID: "web-uid"}, nil
}

const loopTestConfig = `evictionHard: {memory.available: 500Mi}
evictionPressureTransitionPeriod: 30s
evictionLoops: {count: 2, window: 10m, initialBackoff: 2m, maxBackoff: 10m}
`

// leakNode is a node whose Deployment "web" runs one pod that leaks: each
// replacement is a new pod of the same ReplicaSet.
type leakNode struct {
	a     *Agent
	clock *fakeClock
	stats *fakeStats
	pods  *fakePods
	ev    *fakeEvictor
	st    *fakeStatus
	rec   *record.FakeRecorder
	n     int
}

func newLeakNode(t *testing.T, journal string, clock *fakeClock) *leakNode {
	t.Helper()
	cfg, errs := policy.Load([]byte("apiVersion: evictiond.io/v1alpha1\nkind: EvictionConfiguration\n" + loopTestConfig))
	if errs != nil {
		t.Fatal(errs)
	}
	l := &leakNode{clock: clock, stats: &fakeStats{clock: clock, pods: policy.PodStatsByUID{}}, pods: &fakePods{},
		ev: &fakeEvictor{outcome: "evicted"}, st: &fakeStatus{}, rec: record.NewFakeRecorder(100)}
	l.a = New(cfg, Deps{Stats: l.stats, Pods: l.pods, Status: l.st, Evictor: l.ev, Recorder: l.rec, Metrics: metrics.New(), Owners: &fakeOwners{}},
		Options{NodeName: "node-1", Clock: clock, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), LoopJournal: journal})
	return l
}

// leakAndEvict starts a replacement, lets it grow past the threshold and runs
// the pass that evicts it, then removes it (gone) with the pressure.
func (l *leakNode) leakAndEvict(t *testing.T) Report {
	t.Helper()
	l.n++
	yes := true
	name := "web-7d9f8c6b5-" + string(rune('a'+l.n))
	p := pod(name, "100Mi")
	p.Labels = map[string]string{"pod-template-hash": "7d9f8c6b5"}
	p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web-7d9f8c6b5", UID: "rs", Controller: &yes}}
	p.Status.StartTime = &metav1.Time{Time: l.clock.now}
	l.pods.pods = []*v1.Pod{p}
	l.clock.now = l.clock.now.Add(30 * time.Second)
	l.stats.pods = policy.PodStatsByUID{p.UID: {MemoryWorkingSet: i64(3 << 30)}}
	l.stats.obs = policy.Observations{policy.SignalMemoryAvailable: {Available: 400 << 20, Capacity: 8 << 30}}
	before := len(l.ev.calls)
	rep := l.a.Pass(context.Background(), "test")
	if len(l.ev.calls) != before+1 || l.ev.calls[before][0].Pod.UID != types.UID(name) {
		t.Fatalf("replacement %d not evicted: %d calls", l.n, len(l.ev.calls)-before)
	}
	l.pods.pods = nil
	l.stats.obs = policy.Observations{policy.SignalMemoryAvailable: {Available: 4 << 30, Capacity: 8 << 30}}
	return rep
}

// startLoop evicts two replacements, the second after the first's transition
// period: the loop starts with the second (count 2), whose report it returns.
func (l *leakNode) startLoop(t *testing.T) Report {
	t.Helper()
	if rep := l.leakAndEvict(t); len(rep.Loops) != 0 {
		t.Fatalf("first eviction reported a loop: %+v", rep.Loops)
	}
	if c := l.conditionsAt(l.clock.now.Add(31 * time.Second)); len(c) != 0 {
		t.Fatalf("conditions %v 31 s after a single eviction, want none (transition period 30 s only)", c)
	}
	return l.leakAndEvict(t)
}

// conditionsAt runs a pass at at and returns the conditions it published.
func (l *leakNode) conditionsAt(at time.Time) []v1.NodeConditionType {
	l.clock.now = at
	l.a.Pass(context.Background(), "test")
	return l.st.last
}

func TestLoop_SecondEvictionOfAWorkloadHoldsThePressureAndTellsTheOwner(t *testing.T) {
	clock := &fakeClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	l := newLeakNode(t, "", clock)
	rep := l.startLoop(t)
	if len(rep.Loops) != 1 || !rep.Loops[0].Started || rep.Loops[0].Workload.String() != "Deployment ns/web" || rep.Loops[0].Backoff != 2*time.Minute {
		t.Fatalf("second eviction: loops %+v, want Deployment ns/web started, backoff 2m", rep.Loops)
	}
	second := clock.now
	if c := l.conditionsAt(second.Add(time.Minute + 50*time.Second)); len(c) != 1 || c[0] != v1.NodeMemoryPressure {
		t.Fatalf("conditions %v within the 2 m backoff, want [MemoryPressure] held", c)
	}
	if c := l.conditionsAt(second.Add(2*time.Minute + time.Second)); len(c) != 0 {
		t.Fatalf("conditions %v after the backoff, want none", c)
	}
	var loopEvent string
	for len(l.rec.Events) > 0 {
		if e := <-l.rec.Events; strings.Contains(e, "EvictionLoop") {
			loopEvent = e
		}
	}
	for _, want := range []string{"Warning EvictionLoop", "node node-1", "2 evictions of Deployment ns/web", "working set 3072Mi", "growth 102.4Mi/s", "for 2m0s"} {
		if !strings.Contains(loopEvent, want) {
			t.Errorf("EvictionLoop event %q does not contain %q", loopEvent, want)
		}
	}
}

func TestLoop_RestartKeepsTheCountAndTheBackoff(t *testing.T) {
	journal := filepath.Join(t.TempDir(), "loops.json")
	clock := &fakeClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	l := newLeakNode(t, journal, clock)
	l.startLoop(t)
	l.conditionsAt(clock.now.Add(2*time.Minute + time.Second))
	l.leakAndEvict(t) // third: backoff 4 m
	third := clock.now

	restarted := newLeakNode(t, journal, clock)
	restarted.n = l.n
	if c := restarted.conditionsAt(third.Add(3 * time.Minute)); len(c) != 1 {
		t.Fatalf("conditions %v 3 m into the 4 m backoff after a restart, want [MemoryPressure] held", c)
	}
	restarted.clock.now = third.Add(4*time.Minute + time.Second)
	rep := restarted.leakAndEvict(t)
	if len(rep.Loops) != 1 || rep.Loops[0].Count != 4 || rep.Loops[0].Backoff != 8*time.Minute {
		t.Fatalf("fourth eviction after the restart: %+v, want count 4, backoff 8m", rep.Loops)
	}
}

func TestLoop_DamagedJournalIsSetAsideAndCountingStartsAfresh(t *testing.T) {
	dir := t.TempDir()
	journal := filepath.Join(dir, "loops.json")
	if err := os.WriteFile(journal, []byte("{not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	clock := &fakeClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	l := newLeakNode(t, journal, clock)
	if rep := l.leakAndEvict(t); len(rep.Loops) != 0 {
		t.Fatalf("loop from a damaged journal: %+v", rep.Loops)
	}
	aside, _ := filepath.Glob(journal + ".corrupt-*")
	if len(aside) != 1 {
		t.Errorf("damaged journal not set aside: %v", aside)
	}
	if _, err := os.Stat(journal); err != nil {
		t.Errorf("journal not written again after the eviction: %v", err)
	}
}

func TestLoop_TurningLoopsOffReleasesTheBackoffAtOnce(t *testing.T) {
	journal := filepath.Join(t.TempDir(), "loops.json")
	clock := &fakeClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	l := newLeakNode(t, journal, clock)
	l.startLoop(t)
	second := clock.now
	if c := l.conditionsAt(second.Add(time.Minute)); len(c) != 1 {
		t.Fatalf("conditions %v inside the backoff, want [MemoryPressure]", c)
	}
	cfg, errs := policy.Load([]byte("apiVersion: evictiond.io/v1alpha1\nkind: EvictionConfiguration\nevictionHard: {memory.available: 500Mi}\nevictionPressureTransitionPeriod: 30s\nevictionLoops: {enabled: false}\n"))
	if errs != nil {
		t.Fatal(errs)
	}
	l.a.applyConfig(cfg)
	if c := l.conditionsAt(second.Add(time.Minute + time.Second)); len(c) != 0 {
		t.Fatalf("conditions %v after loops were turned off, want none", c)
	}
	if _, err := os.Stat(journal); !os.IsNotExist(err) {
		t.Errorf("journal still there after loops were turned off: %v", err)
	}
}
