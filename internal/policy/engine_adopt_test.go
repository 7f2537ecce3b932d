package policy

import (
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// deletionRequested marks a pod terminating: deletion asked for at `at` with
// grace seconds, as the API server records it (timestamp = request + grace).
func deletionRequested(at time.Time, grace int64) podOpt {
	return func(p *v1.Pod) {
		ts := metav1.NewTime(at.Add(time.Duration(grace) * time.Second))
		p.DeletionTimestamp, p.DeletionGracePeriodSeconds = &ts, &grace
	}
}

// An agent restarted after it evicted a pod (the process killed after the
// Eviction API accepted, or while waiting for the victim) finds the victim
// terminating: it waits for it as for its own eviction, instead of passing
// it over as "already terminating" and evicting a second pod on stats that
// still count the first.
func TestEngine_RestartWaitsForPodTerminatingAtStart(t *testing.T) {
	clock := newFakeClock()
	e := NewEngine(mustLoad(t, "evictionHard: {memory.available: 1Gi}\nenforceNodeAllocatable: []\nloop: {podCleanupTimeout: 30s}"), clock, "")
	victim := newPod("victim", deletionRequested(clock.now.Add(-3*time.Second), 1))
	next := newPod("next")
	stats := PodStatsByUID{"victim": memStats(3 * Gi), "next": memStats(500 * Mi)}

	sel := e.Select(e.Assess(memInput(clock, 100*Mi, []*v1.Pod{victim, next}, stats)), nil, 1)
	if !strings.HasPrefix(sel.Waiting, "waiting for default/victim to terminate (already terminating when evictiond started, deletion requested 3s ago") ||
		len(sel.Candidates) != 0 {
		t.Fatalf("first pass after a restart: waiting %q, %d candidates; want the terminating victim waited for", sel.Waiting, len(sel.Candidates))
	}
	clock.Step(10 * time.Second)
	if sel := e.Select(e.Assess(memInput(clock, 100*Mi, []*v1.Pod{victim, next}, stats)), nil, 1); !strings.HasPrefix(sel.Waiting, "waiting for default/victim") {
		t.Fatalf("still terminating: waiting %q", sel.Waiting)
	}
	// Gone: forgotten at once (its signal is unknown, nothing is credited),
	// and the pressure that remains is acted on.
	clock.Step(time.Second)
	sel = e.Select(e.Assess(memInput(clock, 100*Mi, []*v1.Pod{next}, stats)), nil, 1)
	if sel.Waiting != "" || len(sel.Candidates) != 1 || sel.Candidates[0].Pod.Name != "next" || len(e.Pending()) != 0 {
		t.Fatalf("after the victim left: waiting %q, candidates %d, pending %v", sel.Waiting, len(sel.Candidates), e.Pending())
	}
}

// Only the first assessment adopts, and only deletions younger than
// loop.podCleanupTimeout: a pod stuck terminating for longer holds nothing
// back, and pods deleted later by someone else are not waited for.
func TestEngine_AdoptsOnlyRecentDeletionsAtStart(t *testing.T) {
	clock := newFakeClock()
	e := NewEngine(mustLoad(t, "evictionHard: {memory.available: 1Gi}\nenforceNodeAllocatable: []\nloop: {podCleanupTimeout: 30s}"), clock, "")
	stuck := newPod("stuck", deletionRequested(clock.now.Add(-31*time.Second), 1))
	other := newPod("other")
	stats := PodStatsByUID{"stuck": memStats(3 * Gi), "other": memStats(500 * Mi)}
	sel := e.Select(e.Assess(memInput(clock, 100*Mi, []*v1.Pod{stuck, other}, stats)), nil, 1)
	if sel.Waiting != "" || len(sel.Candidates) != 1 || sel.Candidates[0].Pod.Name != "other" {
		t.Fatalf("deletion older than podCleanupTimeout: waiting %q, candidates %d", sel.Waiting, len(sel.Candidates))
	}

	clock.Step(time.Second)
	later := newPod("later", deletionRequested(clock.now, 30))
	sel = e.Select(e.Assess(memInput(clock, 100*Mi, []*v1.Pod{stuck, other, later}, stats)), nil, 1)
	if sel.Waiting != "" || len(sel.Candidates) != 1 || sel.Candidates[0].Pod.Name != "other" {
		t.Fatalf("a pod deleted after the first pass: waiting %q, candidates %d", sel.Waiting, len(sel.Candidates))
	}
}

// A restarted agent holds the pressure the node still shows (HoldConditions) for
// the transition period, as if observed at start, then releases it; pressure
// observed later extends it as usual.
func TestEngine_HeldConditionsLastTheTransitionPeriod(t *testing.T) {
	clock := newFakeClock()
	e := NewEngine(mustLoad(t, "evictionHard: {memory.available: 1Gi}\nenforceNodeAllocatable: []\nevictionPressureTransitionPeriod: 30s"), clock, "")
	e.HoldConditions([]v1.NodeConditionType{v1.NodeMemoryPressure})
	quiet := memInput(clock, 4*Gi, nil, PodStatsByUID{})
	if a := e.Assess(quiet); len(a.Conditions) != 1 || a.Conditions[0] != v1.NodeMemoryPressure || a.Starved != nil {
		t.Fatalf("right after the restart: conditions %v, starved %v; want MemoryPressure held, nothing starved", a.Conditions, a.Starved)
	}
	clock.Step(29 * time.Second)
	if a := e.Assess(memInput(clock, 4*Gi, nil, PodStatsByUID{})); len(a.Conditions) != 1 {
		t.Fatalf("29s after: conditions %v, want still held", a.Conditions)
	}
	clock.Step(2 * time.Second)
	if a := e.Assess(memInput(clock, 4*Gi, nil, PodStatsByUID{})); len(a.Conditions) != 0 {
		t.Fatalf("31s after: conditions %v, want released", a.Conditions)
	}
}
