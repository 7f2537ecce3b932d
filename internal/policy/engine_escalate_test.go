package policy

import (
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
)

// escalationEngine: soft memory.available 2Gi (1 s grace) and hard 1Gi; "slow"
// (3Gi) soft-evicted at the second assessment, with a 300 s grace.
func escalationEngine(t *testing.T) (*Engine, *fakeClock, []*v1.Pod, PodStatsByUID) {
	t.Helper()
	clock := newFakeClock()
	e := NewEngine(mustLoad(t, "evictionHard: {memory.available: 1Gi}\nevictionSoft: {memory.available: 2Gi}\n"+
		"evictionSoftGracePeriod: {memory.available: 1s}\nevictionMaxPodGracePeriod: 300\nenforceNodeAllocatable: []\nloop: {podCleanupTimeout: 30s}"), clock, "")
	pods := []*v1.Pod{newPod("slow"), newPod("other")}
	stats := PodStatsByUID{"slow": memStats(3 * Gi), "other": memStats(500 * Mi)}
	e.Assess(memInput(clock, 1500*Mi, pods, stats))
	clock.Step(time.Second)
	sel := e.Select(e.Assess(memInput(clock, 1500*Mi, pods, stats)), nil, 1)
	if len(sel.Candidates) != 1 || sel.Candidates[0].Pod.Name != "slow" || sel.Candidates[0].GracePeriodSeconds != 300 {
		t.Fatalf("setup: candidates %+v, want slow with grace 300", sel.Candidates)
	}
	e.Evicted(sel.Candidates[0])
	return e, clock, pods, stats
}

func TestEngine_HardThresholdEscalatesAnInFlightSoftEvictionAndCreditsIt(t *testing.T) {
	e, clock, pods, stats := escalationEngine(t)
	clock.Step(5 * time.Second)
	sel := e.Select(e.Assess(memInput(clock, 900*Mi, pods, stats)), nil, 1)
	if len(sel.Escalate) != 1 || sel.Escalate[0].Pod.Name != "slow" || sel.Escalate[0].GracePeriodSeconds != ImmediateEvictionGracePeriodSeconds || !sel.Escalate[0].Escalated {
		t.Fatalf("escalate %+v, want slow with the hard grace period", sel.Escalate)
	}
	if !strings.Contains(sel.Waiting, "slow (escalated)") {
		t.Fatalf("waiting %q, want the escalated victim's 3Gi credited", sel.Waiting)
	}
	e.Evicted(sel.Escalate[0])
	// Now a hard eviction: awaited until 1 s + loop.victimReleaseTimeout (5 s), then overdue.
	clock.Step(5 * time.Second)
	if sel := e.Select(e.Assess(memInput(clock, 900*Mi, pods, stats)), nil, 1); len(sel.Escalate) != 0 || !strings.HasPrefix(sel.Waiting, "waiting for default/slow") {
		t.Fatalf("5s after the escalation: escalate %d, waiting %q; want it awaited", len(sel.Escalate), sel.Waiting)
	}
	if next := e.NextReleaseBy(); !next.Equal(clock.now.Add(time.Second)) {
		t.Fatalf("NextReleaseBy %v, want in 1s", next.Sub(clock.now))
	}
	clock.Step(time.Second)
	sel = e.Select(e.Assess(memInput(clock, 900*Mi, pods, stats)), nil, 1)
	if o := e.Overdue(); len(o) != 1 || o[0].Key != "default/slow" {
		t.Fatalf("overdue %+v, want slow", o)
	}
	if sel.Waiting != "" || len(sel.Candidates) != 1 || sel.Candidates[0].Pod.Name != "other" {
		t.Fatalf("overdue: waiting %q, candidates %d; want other chosen", sel.Waiting, len(sel.Candidates))
	}
	e.MarkBraked("slow")
	if o := e.Overdue(); len(o) != 0 {
		t.Fatalf("overdue after the brake %+v, want none", o)
	}
}

// An escalation that fails every pass (the API server unreachable) is credited
// no longer than any pending victim is awaited: loop.podCleanupTimeout.
func TestEngine_EscalationCreditEndsAtThePodCleanupTimeout(t *testing.T) {
	e, clock, pods, stats := escalationEngine(t)
	clock.Step(31 * time.Second)
	sel := e.Select(e.Assess(memInput(clock, 900*Mi, pods, stats)), nil, 1)
	if len(sel.Escalate) != 1 {
		t.Fatalf("escalate %d, want slow proposed again", len(sel.Escalate))
	}
	if sel.Waiting != "" || len(sel.Candidates) != 1 || sel.Candidates[0].Pod.Name != "other" {
		t.Fatalf("31s after the soft eviction: waiting %q; want other chosen", sel.Waiting)
	}
}

// Disk victims free their space on removal, not on a kill: never overdue.
func TestEngine_DiskVictimsHaveNoReleaseBound(t *testing.T) {
	clock := newFakeClock()
	e := NewEngine(mustLoad(t, "evictionHard: {nodefs.available: 10%}\nloop: {victimReleaseTimeout: 1s}"), clock, "")
	e.EvictedAt(Candidate{Pod: newPod("writer"), Signal: SignalNodeFsAvailable, Hard: true, GracePeriodSeconds: 1}, clock.now)
	clock.Step(10 * time.Second)
	if o, next := e.Overdue(), e.NextReleaseBy(); len(o) != 0 || !next.IsZero() {
		t.Fatalf("disk victim: overdue %+v, next %v; want none", o, next)
	}
}
