package policy

import (
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

func TestMemoryReclaimIsOffByDefaultAndCompilesItsFields(t *testing.T) {
	cfg := mustLoad(t, "")
	if cfg.MemoryReclaim.Enabled {
		t.Fatal("memoryReclaim on by default: it changes which pod is evicted, it must be asked for")
	}
	if MemoryReclaimDue(cfg, Observations{SignalMemoryAvailable: obsAt(1, 8*Gi, t0)}, FilesystemLayout{}) != nil {
		t.Error("a plan with memoryReclaim off")
	}
	cfg = mustLoad(t, "memoryReclaim: {enabled: true, margin: 50Mi, maxPerPass: 64Mi, podInterval: 10s, guaranteedPods: true}\n")
	want := MemoryReclaimConfig{Enabled: true, Margin: 50 * Mi, MaxPerPass: 64 * Mi, PodInterval: 10 * time.Second, GuaranteedPods: true}
	if cfg.MemoryReclaim != want {
		t.Errorf("compiled %+v, want %+v", cfg.MemoryReclaim, want)
	}
	if n := cfg.Normalized.MemoryReclaim; n.Margin != "50Mi" || n.MaxPerPass != "64Mi" || n.PodInterval != "10s" || !*n.Enabled {
		t.Errorf("normalized %+v", n)
	}
}

func TestMemoryReclaimRejectsBadFieldsNamingThem(t *testing.T) {
	errs := strings.Join(loadErrors(t, "memoryReclaim: {margin: lots, maxPerPass: 1Ki, podInterval: 1ms}\n"), "\n")
	for _, want := range []string{`memoryReclaim.margin: "lots": must be a quantity`, `memoryReclaim.maxPerPass: "1Ki": must be at least 8Mi`,
		`memoryReclaim.podInterval: "1ms": must be at least 1s`} {
		if !strings.Contains(errs, want) {
			t.Errorf("errors lack %q:\n%s", want, errs)
		}
	}
}

func TestMemoryReclaimDueWithinTheMarginOfTheNearestSignal(t *testing.T) {
	cfg := mustLoad(t, "evictionHard: {memory.available: 100Mi, allocatableMemory.available: 500Mi}\nmemoryReclaim: {enabled: true, margin: 100Mi, maxPerPass: 1Gi}\n")
	cases := []struct {
		name            string
		mem, alloc      int64
		wantSignal      Signal
		wantNeed        int64
		wantEvictionDue bool
	}{
		{"both far", 3 * Gi, 2 * Gi, "", 0, false},
		{"at the trigger exactly", 3 * Gi, 600 * Mi, "", 0, false},
		{"allocatable within the margin", 3 * Gi, 550 * Mi, SignalAllocatableMemoryAvailable, 150 * Mi, false},
		{"allocatable met", 3 * Gi, 450 * Mi, SignalAllocatableMemoryAvailable, 250 * Mi, true},
		{"node deeper than allocatable", 50 * Mi, 550 * Mi, SignalMemoryAvailable, 250 * Mi, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			obs := Observations{SignalMemoryAvailable: obsAt(c.mem, 8*Gi, t0), SignalAllocatableMemoryAvailable: obsAt(c.alloc, 7*Gi, t0)}
			p := MemoryReclaimDue(cfg, obs, FilesystemLayout{})
			if c.wantSignal == "" {
				if p != nil {
					t.Fatalf("plan %+v, want none", p)
				}
				return
			}
			if p == nil || p.Signal != c.wantSignal || p.Need != c.wantNeed || p.EvictionDue != c.wantEvictionDue {
				t.Fatalf("plan %+v, want signal %s need %d evictionDue %v", p, c.wantSignal, c.wantNeed, c.wantEvictionDue)
			}
		})
	}
	// maxPerPass caps the need.
	cfg.MemoryReclaim.MaxPerPass = 64 * Mi
	p := MemoryReclaimDue(cfg, Observations{SignalAllocatableMemoryAvailable: obsAt(100*Mi, 7*Gi, t0)}, FilesystemLayout{})
	if p == nil || p.Need != 64*Mi {
		t.Fatalf("plan %+v, want the need capped at maxPerPass 64Mi", p)
	}
}

func TestMemoryReclaimTargetsPodsAboveRequestWithTheMostPageCacheNeverGuaranteedOnes(t *testing.T) {
	cfg := mustLoad(t, "evictionHard: {allocatableMemory.available: 500Mi}\nmemoryReclaim: {enabled: true, margin: 100Mi, maxPerPass: 1Gi, podInterval: 30s}\nexclusions: {namespaces: [infra]}\n")
	guaranteed := newPod("db", withRequests("memory", "1Gi", "cpu", "1"), withLimits("memory", "1Gi", "cpu", "1"))
	withinReq := newPod("within", withRequests("memory", "2Gi"))
	reader := newPod("reader", withRequests("memory", "64Mi"))
	smallCache := newPod("small", withRequests("memory", "64Mi"))
	recent := newPod("recent", withRequests("memory", "64Mi"))
	excluded := newPod("agent", withNamespace("infra"))
	unmeasured := newPod("new")
	self := newPod("evictiond")
	pods := []*v1.Pod{guaranteed, withinReq, reader, smallCache, recent, excluded, unmeasured, self}
	st := func(ws, file int64) PodStats { s := memStats(ws); s.MemoryFile = i64(file); return s }
	stats := PodStatsByUID{"db": st(900*Mi, 800*Mi), "within": st(1*Gi, 900*Mi), "reader": st(300*Mi, 250*Mi),
		"small": st(200*Mi, 4*Mi), "recent": st(500*Mi, 400*Mi), "agent": st(500*Mi, 400*Mi), "new": memStats(10 * Mi),
		"evictiond": st(100*Mi, 90*Mi)}
	last := map[types.UID]time.Time{"recent": t0.Add(-10 * time.Second)}

	plan := MemoryReclaimDue(cfg, Observations{SignalAllocatableMemoryAvailable: obsAt(300*Mi, 7*Gi, t0)}, FilesystemLayout{})
	ChooseMemoryReclaimTargets(plan, cfg, "evictiond", pods, stats, last, t0)
	// Need 500+200-300 = 400Mi: the reader (above its request) gives its 250Mi
	// first, then the pod within its request the remaining 150Mi.
	var got []string
	for _, tg := range plan.Targets {
		got = append(got, tg.Pod.Name+":"+fmtBytes(tg.Ask))
	}
	if strings.Join(got, ",") != "reader:250Mi,within:150Mi" {
		t.Errorf("targets %v, want reader:250Mi,within:150Mi", got)
	}
	skipped := map[string]string{}
	for _, s := range plan.Skipped {
		skipped[s.Pod.Name] = s.Reason
	}
	for name, want := range map[string]string{"db": "Guaranteed", "recent": "podInterval", "agent": "namespace infra", "new": "not measured", "evictiond": "own pod"} {
		if !strings.Contains(skipped[name], want) {
			t.Errorf("pod %s passed over for %q, want a reason with %q", name, skipped[name], want)
		}
	}
	if _, ok := skipped["small"]; ok {
		t.Error("a pod with too little page cache is listed as passed over; it is simply not worth a scan")
	}
	// guaranteedPods: true lets the Guaranteed pod give too (here after the
	// reader, the pod within its request left out).
	cfg.MemoryReclaim.GuaranteedPods = true
	plan = MemoryReclaimDue(cfg, Observations{SignalAllocatableMemoryAvailable: obsAt(300*Mi, 7*Gi, t0)}, FilesystemLayout{})
	ChooseMemoryReclaimTargets(plan, cfg, "evictiond", []*v1.Pod{guaranteed, reader}, stats, last, t0)
	found := false
	for _, tg := range plan.Targets {
		found = found || tg.Pod.Name == "db"
	}
	if !found {
		t.Errorf("guaranteedPods: true, yet the Guaranteed pod was not asked (%d targets, skipped %v)", len(plan.Targets), plan.Skipped)
	}
}

func TestMemoryThresholdMetLooksAtHardByteThresholdsOnly(t *testing.T) {
	cfg := mustLoad(t, "evictionHard: {allocatableMemory.available: 500Mi, memory.pressure.some.avg10: \"50%\"}\nevictionSoft: {memory.available: 2Gi}\nevictionSoftGracePeriod: {memory.available: 1m}\n")
	obs := Observations{SignalMemoryAvailable: obsAt(1*Gi, 8*Gi, t0), SignalAllocatableMemoryAvailable: obsAt(600*Mi, 7*Gi, t0),
		SignalMemoryPSISomeAvg10: obsAt(0, PSIScale, t0)}
	if MemoryThresholdMet(cfg, obs, FilesystemLayout{}) {
		t.Error("met: a soft threshold and a PSI one count as an eviction due after reclaim")
	}
	obs[SignalAllocatableMemoryAvailable] = obsAt(400*Mi, 7*Gi, t0)
	if !MemoryThresholdMet(cfg, obs, FilesystemLayout{}) {
		t.Error("not met with allocatableMemory.available below its hard threshold")
	}
}
