package policy

import (
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
)

// swapStats is a pod with working set ws and swap bytes in swap.
func swapStats(ws, swap int64) PodStats {
	st := memStats(ws)
	st.MemorySwap = i64(swap)
	return st
}

// swapInput: swap.available at avail of 1Gi of swap, memory.available far above any threshold.
func swapInput(clock *fakeClock, avail int64, pods []*v1.Pod, stats PodStatsByUID) Input {
	return Input{Observations: Observations{
		SignalMemoryAvailable: obsAt(6*Gi, 8*Gi, clock.now),
		SignalSwapAvailable:   obsAt(avail, Gi, clock.now),
	}, Pods: pods, Stats: stats}
}

func TestSwap_OffByDefault(t *testing.T) {
	for _, body := range []string{"", "mergeDefaultEvictionSettings: true\nevictionHard: {memory.available: 1Gi}", "evictionHard: {memory.available: 1Gi}"} {
		for _, th := range mustLoad(t, body).Thresholds {
			if th.Signal == SignalSwapAvailable {
				t.Errorf("config %q: a swap.available threshold the user did not set: %+v", body, th)
			}
		}
	}
}

func TestSwap_ThresholdForms(t *testing.T) {
	for _, body := range []string{
		`evictionHard: {swap.available: "20%"}`,
		`evictionHard: "swap.available<20%"`,
		`evictionHard: {swap.available: "max(20%, 100Mi)"}`,
		`evictionHard: {swap.available: 200Mi}`,
	} {
		cfg := mustLoad(t, body)
		if len(cfg.Thresholds) != 1 || cfg.Thresholds[0].Signal != SignalSwapAvailable {
			t.Fatalf("%s: thresholds %s, want swap.available/hard", body, signalsOf(cfg.Thresholds))
		}
		if got := cfg.Thresholds[0].quantity(Gi); got != 200*Mi && got != (ThresholdValue{Percentage: 0.2}).Resolve(Gi) {
			t.Errorf("%s: resolves to %d against 1Gi of swap, want 20%% of it or 200Mi", body, got)
		}
	}
	if errs := loadErrors(t, `evictionHard: "swap.available>20%"`); len(errs) == 0 || !strings.Contains(errs[0], `only "<" is supported for swap.available`) {
		t.Errorf("swap.available>20%%: errors %v, want the operator named", errs)
	}
	if errs := loadErrors(t, `evictionHard: {swap.available: 100Ti}`); len(errs) == 0 || !strings.Contains(errs[0], "must be at most 64Ti") {
		t.Errorf("swap.available 100Ti: errors %v, want the range named", errs)
	}
}

// A node without swap has no swap.available observation: a threshold on it is never met
// and never evicts, it is not "0 bytes of swap left".
func TestSwap_NodeWithoutSwapNeverEvicts(t *testing.T) {
	clock := newFakeClock()
	e := NewEngine(mustLoad(t, "evictionHard: {memory.available: 100Mi, swap.available: 50%}\nenforceNodeAllocatable: []"), clock, "")
	pod := newPod("hog", withRequests("memory", "100Mi"))
	a := e.Assess(Input{Observations: Observations{SignalMemoryAvailable: obsAt(6*Gi, 8*Gi, clock.now)},
		Pods: []*v1.Pod{pod}, Stats: PodStatsByUID{"hog": memStats(2 * Gi)}})
	if len(a.Met) != 0 || a.Starved != nil || len(a.Conditions) != 0 {
		t.Fatalf("no swap on the node: met %v, conditions %v", a.Met, a.Conditions)
	}
}

func TestSwap_MetSetsMemoryPressureAndExplains(t *testing.T) {
	clock := newFakeClock()
	e := NewEngine(mustLoad(t, "evictionHard: {memory.available: 100Mi, swap.available: 50%}\nenforceNodeAllocatable: []"), clock, "")
	hog := newPod("hog", withRequests("memory", "1Gi"))
	big := newPod("big", withRequests("memory", "100Mi"))
	stats := PodStatsByUID{"hog": swapStats(Gi+10*Mi, 300*Mi), "big": swapStats(3*Gi, 0)}
	a := e.Assess(swapInput(clock, 400*Mi, []*v1.Pod{hog, big}, stats))
	if a.Starved == nil || a.Starved.Threshold.Signal != SignalSwapAvailable {
		t.Fatalf("swap.available 400Mi < 512Mi not acted on: met %v", a.Met)
	}
	if len(a.Conditions) != 1 || a.Conditions[0] != v1.NodeMemoryPressure {
		t.Errorf("conditions %v, want MemoryPressure", a.Conditions)
	}
	sel := e.Select(a, nil, 1)
	if len(sel.Candidates) != 1 {
		t.Fatalf("no candidate (waiting %q)", sel.Waiting)
	}
	c := sel.Candidates[0]
	// big is 2.9Gi over its request but holds no swap: evicting it frees none.
	if c.Pod.Name != "hog" {
		t.Fatalf("victim %s, want hog (the only pod holding swap): %s", c.Pod.Name, c.Reason)
	}
	want := "The node was low on resource: swap. Threshold quantity: 512Mi, available: 400Mi. " +
		"Pod was using 300Mi of swap and a working set of 1034Mi, memory request 1Gi. " +
		"Container c was using 1034Mi, request is 1Gi, has larger consumption of memory. "
	if c.Message != want {
		t.Errorf("message:\n%q\nwant:\n%q", c.Message, want)
	}
	if c.Annotations[AnnotationStarvedResource] != "swap" || c.ExpectedReclaim != 300*Mi {
		t.Errorf("starved %q, expected reclaim %d; want swap, 300Mi", c.Annotations[AnnotationStarvedResource], c.ExpectedReclaim)
	}
	if !strings.Contains(c.Reason, "holds 300Mi of swap; working set + swap 1334Mi exceeds its memory request 1Gi") {
		t.Errorf("reason %q does not give the swap and the request", c.Reason)
	}
}

// Ranking for swap.available: pods holding swap first, then the kubelet's memory keys
// with swap counted in the usage: over the request, priority, amount above the request.
func TestRank_SwapPressure(t *testing.T) {
	cases := []struct {
		name  string
		pods  []*v1.Pod
		stats PodStatsByUID
		want  string
	}{
		{
			name:  "a pod holding no swap goes after any holding some",
			pods:  []*v1.Pod{newPod("besteffort-big"), newPod("burstable", withRequests("memory", "1Gi"))},
			stats: PodStatsByUID{"besteffort-big": swapStats(3*Gi, 0), "burstable": swapStats(900*Mi, 10*Mi)},
			want:  "burstable,besteffort-big",
		},
		{
			name:  "swap counts as usage: within its request by working set, over it with swap",
			pods:  []*v1.Pod{newPod("within", withRequests("memory", "1Gi")), newPod("over", withRequests("memory", "1Gi"))},
			stats: PodStatsByUID{"within": swapStats(500*Mi, 400*Mi), "over": swapStats(900*Mi, 200*Mi)},
			want:  "over,within", // 1100Mi > 1Gi; 900Mi < 1Gi
		},
		{
			name:  "both over: lower priority first",
			pods:  []*v1.Pod{newPod("hi", withPriority(100), withRequests("memory", "100Mi")), newPod("lo", withRequests("memory", "100Mi"))},
			stats: PodStatsByUID{"hi": swapStats(Gi, Gi), "lo": swapStats(101*Mi, Mi)},
			want:  "lo,hi",
		},
		{
			name:  "same priority: most memory+swap above request first",
			pods:  []*v1.Pod{newPod("a", withRequests("memory", "1Gi")), newPod("b", withRequests("memory", "100Mi"))},
			stats: PodStatsByUID{"a": swapStats(Gi, 600*Mi), "b": swapStats(500*Mi, 100*Mi)},
			want:  "a,b", // 600Mi over vs 500Mi over
		},
		{
			name:  "swap not measured: no stats, ranked first (the kubelet's rule)",
			pods:  []*v1.Pod{newPod("hog", withRequests("memory", "100Mi")), newPod("unknown", withPriority(1000))},
			stats: PodStatsByUID{"hog": swapStats(Gi, Gi), "unknown": memStats(10 * Mi)},
			want:  "unknown,hog",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := rankFor(tc.pods, tc.stats, SignalSwapAvailable, FilesystemLayout{}); got != tc.want {
				t.Errorf("rank = %s, want %s", got, tc.want)
			}
		})
	}
	// memory.available keeps the kubelet's order: swap is not RAM it would free.
	pods := []*v1.Pod{newPod("swapped", withRequests("memory", "100Mi")), newPod("resident", withRequests("memory", "100Mi"))}
	stats := PodStatsByUID{"swapped": swapStats(200*Mi, 2*Gi), "resident": swapStats(Gi, 0)}
	if got := rankFor(pods, stats, SignalMemoryAvailable, FilesystemLayout{}); got != "resident,swapped" {
		t.Errorf("memory.available rank = %s, want resident,swapped (working set only)", got)
	}
}
