package agent

import (
	"context"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/evictiond/evictiond/internal/eviction"
	"github.com/evictiond/evictiond/internal/policy"
)

// fakeMemReclaimer answers memory.reclaim writes: freed bytes, or an error;
// after the write the node reads afterReclaim (the fakeStats' field).
type fakeMemReclaimer struct {
	stats *fakeStats
	asked []string
	freed int64
	err   error
}

func (r *fakeMemReclaimer) ReclaimPodMemory(ctx context.Context, pod *v1.Pod, bytes int64) eviction.ReclaimResult {
	r.asked = append(r.asked, pod.Name)
	if r.err == nil && r.stats.afterReclaim != nil {
		r.stats.obs = r.stats.afterReclaim
	}
	return eviction.ReclaimResult{Freed: r.freed, Items: 1, Err: r.err}
}

const memReclaimConfig = "evictionHard: {memory.available: 500Mi}\nmemoryReclaim: {enabled: true, margin: 100Mi, podInterval: 10s}\n"

func TestPass_MemoryReclaimThatSufficesEvictsNobodyAndCountsTheAvoidedEviction(t *testing.T) {
	a, _, stats, ev, st, rec := newTestAgent(t, memReclaimConfig)
	stats.pods["hog"] = policy.PodStats{MemoryWorkingSet: i64(3 << 30), MemoryFile: i64(1 << 30)}
	stats.obs = policy.Observations{policy.SignalMemoryAvailable: {Available: 400 << 20, Capacity: 8 << 30}}
	stats.afterReclaim = policy.Observations{policy.SignalMemoryAvailable: {Available: 700 << 20, Capacity: 8 << 30}}
	r := &fakeMemReclaimer{stats: stats, freed: 300 << 20}
	a.memReclaimer = r
	rep := a.pass(context.Background(), "test")
	if len(r.asked) != 1 || r.asked[0] != "hog" {
		t.Fatalf("asked %v, want the pod with page cache, hog", r.asked)
	}
	if len(ev.calls) != 0 || len(st.last) != 0 {
		t.Fatalf("reclaim sufficed, yet %d evictions, conditions %v", len(ev.calls), st.last)
	}
	if rep.MemoryReclaim == nil || !rep.MemoryReclaim.EvictionAvoided || rep.MemoryReclaim.Plan.Targets[0].Ask != 256<<20 {
		t.Fatalf("report %+v, want hog asked 256Mi (300Mi to 500Mi + 2×100Mi, capped at maxPerPass) and the eviction avoided", rep.MemoryReclaim)
	}
	if !eventsContain(rec, "MemoryReclaimed") {
		t.Error("no MemoryReclaimed Event on the pod")
	}
}

func TestPass_MemoryReclaimOnANodeWithoutItTurnsItselfOffAndEvicts(t *testing.T) {
	a, clock, stats, ev, _, _ := newTestAgent(t, memReclaimConfig)
	stats.pods["hog"] = policy.PodStats{MemoryWorkingSet: i64(3 << 30), MemoryFile: i64(1 << 30)}
	stats.obs = policy.Observations{policy.SignalMemoryAvailable: {Available: 400 << 20, Capacity: 8 << 30}}
	r := &fakeMemReclaimer{stats: stats, err: ErrMemoryReclaimUnsupported}
	a.memReclaimer = r
	a.pass(context.Background(), "test")
	if len(ev.calls) != 1 {
		t.Fatalf("%d evictions, want the hard threshold's one", len(ev.calls))
	}
	clock.now = clock.now.Add(time.Minute)
	a.pass(context.Background(), "test")
	if len(r.asked) != 1 {
		t.Errorf("asked %d times, want once: the node said it has no memory.reclaim", len(r.asked))
	}
}

func TestPass_MemoryReclaimInDryRunWritesNothing(t *testing.T) {
	a, _, stats, _, _, _ := newTestAgent(t, memReclaimConfig+"dryRun: true\n")
	stats.pods["hog"] = policy.PodStats{MemoryWorkingSet: i64(3 << 30), MemoryFile: i64(1 << 30)}
	stats.obs = policy.Observations{policy.SignalMemoryAvailable: {Available: 550 << 20, Capacity: 8 << 30}}
	r := &fakeMemReclaimer{stats: stats}
	a.memReclaimer = r
	rep := a.pass(context.Background(), "test")
	if len(r.asked) != 0 || rep.MemoryReclaim == nil || len(rep.MemoryReclaim.Plan.Targets) != 1 {
		t.Fatalf("dry run: asked %v, report %+v; want the plan and no write", r.asked, rep.MemoryReclaim)
	}
}

// A pod stalled against its own limit: one Event per episode, no condition,
// no eviction of the pod most above its request.
func TestPass_SelfInflictedPressureIsReportedOnceAndEvictsNobody(t *testing.T) {
	a, clock, stats, ev, st, rec := newTestAgent(t, "evictionHard: {memory.available: 100Mi, allocatableMemory.pressure.some.avg10: 30%}\n")
	stalled := &policy.PodMemoryPressure{Some: [3]int64{4500, 2000, 800}, Full: [3]int64{3000, 0, 0}, Usage: 60 << 20, Limit: 64 << 20}
	stats.pods["calm"] = policy.PodStats{MemoryWorkingSet: i64(60 << 20), MemoryPressure: stalled}
	stats.obs = policy.Observations{policy.SignalMemoryAvailable: {Available: 6 << 30, Capacity: 8 << 30},
		policy.SignalAllocatableMemoryPSISomeAvg10: {Available: policy.PSIScale - 4700, Capacity: policy.PSIScale}}
	for range 3 {
		a.pass(context.Background(), "test")
		clock.now = clock.now.Add(time.Second)
	}
	if len(ev.calls) != 0 || len(st.last) != 0 {
		t.Fatalf("one pod's own stall: %d evictions, conditions %v", len(ev.calls), st.last)
	}
	n := 0
	for len(rec.Events) > 0 {
		if e := <-rec.Events; len(e) > 0 && strings.Contains(e, "SelfInflictedMemoryPressure") {
			n++
		}
	}
	if n != 1 {
		t.Errorf("%d SelfInflictedMemoryPressure Events over 3 passes, want 1", n)
	}
	// Its stall gone, the same stall elsewhere is node pressure again.
	stats.pods["calm"] = policy.PodStats{MemoryWorkingSet: i64(60 << 20)}
	a.pass(context.Background(), "test")
	if len(st.last) != 1 || len(ev.calls) != 1 {
		t.Errorf("the stall no longer explained: conditions %v, %d evictions; want MemoryPressure and one eviction", st.last, len(ev.calls))
	}
}
