package policy

import (
	"fmt"
	"slices"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
)

func hardMem(q string) Threshold {
	v, raw, err := parseThresholdValue(SignalMemoryAvailable, q)
	if err != nil {
		panic(err)
	}
	return Threshold{Signal: SignalMemoryAvailable, Value: *v, Raw: raw}
}

// Section 3.2 step 6: met iff threshold > available, strictly.
func TestThresholdsMet_StrictlyGreaterThanAvailable(t *testing.T) {
	cases := []struct {
		name      string
		threshold string
		available int64
		capacity  int64
		met       bool
	}{
		{"available below threshold", "100Mi", 100*Mi - 1, 8 * Gi, true},
		{"available equal to threshold", "100Mi", 100 * Mi, 8 * Gi, false},
		{"available above threshold", "100Mi", 100*Mi + 1, 8 * Gi, false},
		{"percentage resolved against capacity, below", "10%", 10*Gi - 1, 100 * Gi, true},
		{"percentage resolved against capacity, equal", "50%", 50 * Gi, 100 * Gi, false},
		// float32(0.1) is a little above 0.1, as in the kubelet (ThresholdValue.Percentage is float32).
		{"float32 percentage rounds up as the kubelet's", "10%", 10 * Gi, 100 * Gi, true},
		{"nothing available", "1", 0, 8 * Gi, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			th := hardMem(tc.threshold)
			got := len(thresholdsMet([]Threshold{th}, Observations{SignalMemoryAvailable: obsAt(tc.available, tc.capacity, t0)}, false)) == 1
			if got != tc.met {
				t.Fatalf("%s < %d (capacity %d): met = %v, want %v", tc.threshold, tc.available, tc.capacity, got, tc.met)
			}
		})
	}
}

func TestThresholdsMet_MissingObservationNeverMet(t *testing.T) {
	ts := []Threshold{hardMem("100Mi"), {Signal: SignalNodeFsAvailable, Value: ThresholdValue{Percentage: 0.1}}}
	got := thresholdsMet(ts, Observations{SignalNodeFsAvailable: obsAt(50*Gi, 100*Gi, t0)}, false)
	if len(got) != 0 {
		t.Fatalf("met without an observation: %s", signalsOf(got))
	}
	if got := thresholdsMet(ts, Observations{}, true); len(got) != 0 {
		t.Fatalf("met with no observations at all: %s", signalsOf(got))
	}
}

// Section 3.2 step 7: a threshold acted on stays met until available >=
// threshold + minimum reclaim.
func TestEngine_MinimumReclaimHysteresis(t *testing.T) {
	cfg := mustLoad(t, "evictionHard: {memory.available: 500Mi}\nevictionMinimumReclaim: {memory.available: 200Mi}\nenforceNodeAllocatable: []")
	clock := newFakeClock()
	e := NewEngine(cfg, clock, "")
	steps := []struct {
		available int64
		met       bool
	}{
		{600 * Mi, false}, // above the threshold, never acted on
		{499 * Mi, true},  // met
		{600 * Mi, true},  // above the threshold but below threshold + minimum reclaim
		{699 * Mi, true},
		{700 * Mi, false}, // threshold + minimum reclaim reached
		{600 * Mi, false}, // resolved: plain threshold again
	}
	for i, s := range steps {
		clock.Step(time.Second)
		a := e.Assess(Input{Observations: Observations{SignalMemoryAvailable: obsAt(s.available, 8*Gi, clock.now)}})
		if got := len(a.Met) > 0; got != s.met {
			t.Fatalf("step %d, available %dMi: met = %v, want %v", i, s.available/Mi, got, s.met)
		}
		if got := a.Starved != nil; got != s.met {
			t.Fatalf("step %d: starved = %v, want %v", i, got, s.met)
		}
	}
}

// A soft threshold does not get hysteresis before its grace period elapsed
// (only thresholds acted on, the kubelet's m.thresholdsMet, do).
func TestEngine_NoHysteresisBeforeGraceElapsed(t *testing.T) {
	cfg := mustLoad(t, "evictionHard: {}\nevictionSoft: {memory.available: 1Gi}\nevictionSoftGracePeriod: {memory.available: 1m}\nevictionMinimumReclaim: {memory.available: 500Mi}")
	clock := newFakeClock()
	e := NewEngine(cfg, clock, "")
	obs := func(avail int64) Input {
		return Input{Observations: Observations{SignalMemoryAvailable: obsAt(avail, 8*Gi, clock.now)}}
	}
	if a := e.Assess(obs(900 * Mi)); len(a.Met) != 1 || a.Starved != nil {
		t.Fatalf("t=0: met %d starved %v, want met and not starved", len(a.Met), a.Starved)
	}
	clock.Step(10 * time.Second)
	if a := e.Assess(obs(1100 * Mi)); len(a.Met) != 0 {
		t.Fatalf("above the soft threshold before its grace elapsed: still met")
	}
}

// Section 3.2 steps 8, 12: grace periods count from first observation; a
// soft threshold that stops being met starts over.
func TestEngine_GracePeriods(t *testing.T) {
	cfg := mustLoad(t, "evictionHard: {memory.available: 100Mi}\nevictionSoft: {memory.available: 1Gi}\nevictionSoftGracePeriod: {memory.available: 30s}")
	clock := newFakeClock()
	e := NewEngine(cfg, clock, "")
	type want struct {
		softGrace bool
		starved   string
	}
	steps := []struct {
		after     time.Duration
		available int64
		want      want
	}{
		{0, 900 * Mi, want{false, ""}},
		{29 * time.Second, 900 * Mi, want{false, ""}},
		{time.Second, 900 * Mi, want{true, "memory.available/soft"}}, // 30 s: grace elapsed (>=)
		{time.Second, 2 * Gi, want{false, ""}},                       // pressure over
		{time.Second, 900 * Mi, want{false, ""}},                     // starts over
		{29 * time.Second, 900 * Mi, want{false, ""}},
		{time.Second, 900 * Mi, want{true, "memory.available/soft"}},
		{time.Second, 50 * Mi, want{true, "memory.available/hard"}}, // hard acts at once, before soft
	}
	for i, s := range steps {
		clock.Step(s.after)
		a := e.Assess(Input{Observations: Observations{SignalMemoryAvailable: obsAt(s.available, 8*Gi, clock.now)}})
		var soft *ThresholdStatus
		for j := range a.Met {
			if !a.Met[j].Threshold.Hard() {
				soft = &a.Met[j]
			}
		}
		gotGrace := soft != nil && soft.GraceSatisfied
		gotStarved := ""
		if a.Starved != nil {
			gotStarved = signalsOf([]Threshold{a.Starved.Threshold})
		}
		if gotGrace != s.want.softGrace || gotStarved != s.want.starved {
			t.Fatalf("step %d (%v, %dMi): soft grace satisfied %v, starved %q; want %v, %q",
				i, clock.now.Sub(t0), s.available/Mi, gotGrace, gotStarved, s.want.softGrace, s.want.starved)
		}
	}
}

func TestThresholdsMetGracePeriod(t *testing.T) {
	soft := Threshold{Signal: SignalMemoryAvailable, GracePeriod: time.Minute}
	hard := Threshold{Signal: SignalNodeFsAvailable}
	first := map[string]time.Time{soft.id(): t0, hard.id(): t0}
	cases := []struct {
		now  time.Time
		want string
	}{
		{t0, "nodefs.available/hard"},
		{t0.Add(time.Minute - 1), "nodefs.available/hard"},
		{t0.Add(time.Minute), "memory.available/soft,nodefs.available/hard"},
	}
	for _, tc := range cases {
		if got := signalsOf(thresholdsMetGracePeriod([]Threshold{soft, hard}, first, tc.now)); got != tc.want {
			t.Errorf("at %v: %q, want %q", tc.now.Sub(t0), got, tc.want)
		}
	}
	if got := thresholdsMetGracePeriod([]Threshold{soft}, map[string]time.Time{}, t0.Add(time.Hour)); len(got) != 0 {
		t.Errorf("threshold never observed passed its grace period")
	}
}

// Section 3.2 step 9: conditions are set as soon as a threshold is met,
// before its grace period; step 11: kept for the transition period.
func TestEngine_ConditionsBeforeGraceAndTransitionPeriod(t *testing.T) {
	cfg := mustLoad(t, `
evictionHard: {}
evictionSoft: {memory.available: 1Gi, nodefs.available: 10%, pid.available: "1000"}
evictionSoftGracePeriod: {memory.available: 10m, nodefs.available: 10m, pid.available: 10m}
evictionPressureTransitionPeriod: 1m`)
	clock := newFakeClock()
	e := NewEngine(cfg, clock, "")
	assess := func(mem, fs, pids int64) []v1.NodeConditionType {
		return e.Assess(Input{Observations: Observations{
			SignalMemoryAvailable: obsAt(mem, 8*Gi, clock.now),
			SignalNodeFsAvailable: obsAt(fs, 100*Gi, clock.now),
			SignalPIDAvailable:    obsAt(pids, 32768, clock.now),
		}}).Conditions
	}
	steps := []struct {
		after         time.Duration
		mem, fs, pids int64
		want          string
	}{
		{0, 4 * Gi, 50 * Gi, 30000, "[]"},
		{time.Second, 512 * Mi, 50 * Gi, 30000, "[MemoryPressure]"},
		{time.Second, 512 * Mi, 5 * Gi, 500, "[MemoryPressure DiskPressure PIDPressure]"},
		{time.Second, 4 * Gi, 50 * Gi, 30000, "[MemoryPressure DiskPressure PIDPressure]"},      // transition period
		{58 * time.Second, 4 * Gi, 50 * Gi, 30000, "[MemoryPressure DiskPressure PIDPressure]"}, // 59 s after
		{time.Second, 4 * Gi, 50 * Gi, 30000, "[]"},                                             // 1m after the last observation
	}
	for i, s := range steps {
		clock.Step(s.after)
		if got := fmt.Sprint(assess(s.mem, s.fs, s.pids)); got != s.want {
			t.Fatalf("step %d (%v): conditions %s, want %s", i, clock.now.Sub(t0), got, s.want)
		}
	}
}

func TestNodeConditionsObservedSince(t *testing.T) {
	last := map[v1.NodeConditionType]time.Time{v1.NodeMemoryPressure: t0, v1.NodeDiskPressure: t0.Add(-5 * time.Minute)}
	got := nodeConditionsObservedSince(last, 5*time.Minute, t0.Add(5*time.Minute-1))
	if fmt.Sprint(got) != "[MemoryPressure]" {
		t.Fatalf("got %v, want [MemoryPressure] (DiskPressure observed exactly one period ago has lapsed)", got)
	}
}

// Section 3.2 step 13: thresholdsUpdatedStats — act only on observations
// newer than the previous pass's.
func TestThresholdsUpdatedStats(t *testing.T) {
	th := hardMem("100Mi")
	cases := []struct {
		name string
		now  Observations
		last Observations
		keep bool
	}{
		{"no previous observation", Observations{SignalMemoryAvailable: obsAt(0, Gi, t0)}, Observations{}, true},
		{"previous with zero time", Observations{SignalMemoryAvailable: obsAt(0, Gi, t0)}, Observations{SignalMemoryAvailable: {}}, true},
		{"newer", Observations{SignalMemoryAvailable: obsAt(0, Gi, t0.Add(time.Millisecond))}, Observations{SignalMemoryAvailable: obsAt(0, Gi, t0)}, true},
		{"same sample", Observations{SignalMemoryAvailable: obsAt(0, Gi, t0)}, Observations{SignalMemoryAvailable: obsAt(0, Gi, t0)}, false},
		{"older", Observations{SignalMemoryAvailable: obsAt(0, Gi, t0)}, Observations{SignalMemoryAvailable: obsAt(0, Gi, t0.Add(time.Second))}, false},
		{"no current observation", Observations{}, Observations{}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := len(thresholdsUpdatedStats([]Threshold{th}, tc.now, tc.last)) == 1
			if got != tc.keep {
				t.Fatalf("kept = %v, want %v", got, tc.keep)
			}
		})
	}
}

func TestEngine_StaleStatsNotActedOnTwice(t *testing.T) {
	cfg := mustLoad(t, "evictionHard: {nodefs.available: 10%}")
	clock := newFakeClock()
	e := NewEngine(cfg, clock, "")
	sample := Observations{SignalNodeFsAvailable: obsAt(5*Gi, 100*Gi, t0)}
	a := e.Assess(Input{Observations: sample})
	if a.Starved == nil || !a.Met[0].Fresh {
		t.Fatalf("first pass on a fresh sample: not starved")
	}
	clock.Step(time.Second)
	a = e.Assess(Input{Observations: sample})
	if a.Starved != nil {
		t.Fatalf("second pass on the same sample acted again")
	}
	if len(a.Met) != 1 || a.Met[0].Fresh || fmt.Sprint(a.Conditions) != "[DiskPressure]" {
		t.Fatalf("stale sample: met %d fresh %v conditions %v; want met, stale, DiskPressure", len(a.Met), a.Met[0].Fresh, a.Conditions)
	}
	clock.Step(time.Second)
	a = e.Assess(Input{Observations: Observations{SignalNodeFsAvailable: obsAt(5*Gi, 100*Gi, clock.now)}})
	if a.Starved == nil {
		t.Fatalf("newer sample: not starved")
	}
}

// Section 3.2 step 16: memory signals first.
func TestByEvictionPriority_MemoryFirst(t *testing.T) {
	in := []Threshold{
		{Signal: SignalPIDAvailable},
		{Signal: SignalNodeFsAvailable, GracePeriod: time.Minute},
		{Signal: SignalImageFsInodesFree},
		{Signal: SignalMemoryPSISomeAvg10},
		{Signal: SignalAllocatableMemoryAvailable},
		{Signal: SignalNodeFsAvailable},
		{Signal: SignalMemoryAvailable, GracePeriod: time.Minute},
		{Signal: SignalMemoryAvailable},
	}
	want := "memory.available/hard,memory.available/soft,allocatableMemory.available/hard,memory.pressure.some.avg10/hard," +
		"nodefs.available/hard,nodefs.available/soft,imagefs.inodesFree/hard,pid.available/hard"
	if got := signalsOf(byEvictionPriority(in)); got != want {
		t.Fatalf("order:\n%s\nwant:\n%s", got, want)
	}
	if got := signalsOf(in); got == want {
		t.Fatalf("byEvictionPriority sorted its input in place")
	}
}

// Section 6.1: node-level reclaim per signal and layout, with evictiond's
// dead-pod log cleanup where logs live and container GC for nodefs with a
// dedicated imagefs (kubernetes#129616).
func TestNodeReclaimSteps_PerLayout(t *testing.T) {
	single := FilesystemLayout{}
	dedicated := FilesystemLayout{DedicatedImageFs: true}
	split := FilesystemLayout{DedicatedImageFs: true, SplitContainerFs: true}
	all := []ReclaimStep{ReclaimContainerGC, ReclaimPodLogs, ReclaimImageGC}
	gcLogs := []ReclaimStep{ReclaimContainerGC, ReclaimPodLogs}
	cases := []struct {
		signal Signal
		layout FilesystemLayout
		want   []ReclaimStep
	}{
		{SignalNodeFsAvailable, single, all},
		{SignalNodeFsInodesFree, single, all},
		{SignalImageFsAvailable, single, all},
		{SignalContainerFsAvailable, single, all},
		{SignalNodeFsAvailable, dedicated, gcLogs},
		{SignalNodeFsInodesFree, dedicated, gcLogs},
		{SignalImageFsAvailable, dedicated, []ReclaimStep{ReclaimContainerGC, ReclaimImageGC}},
		{SignalImageFsInodesFree, dedicated, []ReclaimStep{ReclaimContainerGC, ReclaimImageGC}},
		{SignalContainerFsAvailable, dedicated, []ReclaimStep{ReclaimContainerGC, ReclaimImageGC}},
		{SignalNodeFsAvailable, split, gcLogs},
		{SignalImageFsAvailable, split, []ReclaimStep{ReclaimImageGC}},
		{SignalImageFsInodesFree, split, []ReclaimStep{ReclaimImageGC}},
		{SignalContainerFsAvailable, split, gcLogs},
		{SignalContainerFsInodesFree, split, gcLogs},
		{SignalMemoryAvailable, single, nil},
		{SignalAllocatableMemoryAvailable, dedicated, nil},
		{SignalPIDAvailable, split, nil},
		{SignalMemoryPSIFullAvg10, single, nil},
	}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("%s/%+v", tc.signal, tc.layout), func(t *testing.T) {
			if got := nodeReclaimSteps(tc.signal, tc.layout); !slices.Equal(got, tc.want) {
				t.Fatalf("steps = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestEngine_NodeReclaimPlan(t *testing.T) {
	cases := []struct {
		name    string
		body    string
		layout  FilesystemLayout
		signal  Signal
		avail   int64
		wantNil bool
		steps   []ReclaimStep
		need    int64
	}{
		{name: "need is threshold + minimum reclaim - available", body: "evictionHard: {nodefs.available: 10Gi}\nevictionMinimumReclaim: {nodefs.available: 2Gi}",
			signal: SignalNodeFsAvailable, avail: 9 * Gi, steps: []ReclaimStep{ReclaimContainerGC, ReclaimPodLogs, ReclaimImageGC}, need: 3 * Gi},
		{name: "disabled steps are left out", body: "evictionHard: {imagefs.available: 10Gi}\nreclaim: {containerGC: false}",
			layout: FilesystemLayout{DedicatedImageFs: true}, signal: SignalImageFsAvailable, avail: 9 * Gi, steps: []ReclaimStep{ReclaimImageGC}, need: Gi},
		{name: "every step disabled: no plan", body: "evictionHard: {imagefs.available: 10Gi}\nreclaim: {imageGC: {enabled: false}}",
			layout: FilesystemLayout{DedicatedImageFs: true, SplitContainerFs: true}, signal: SignalImageFsAvailable, avail: 9 * Gi, wantNil: true},
		{name: "memory has no node-level reclaim", body: "evictionHard: {memory.available: 1Gi}",
			signal: SignalMemoryAvailable, avail: 512 * Mi, wantNil: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := NewEngine(mustLoad(t, tc.body), newFakeClock(), "")
			a := e.Assess(Input{Layout: tc.layout, Observations: Observations{tc.signal: obsAt(tc.avail, 100*Gi, t0)}})
			if a.Starved == nil || a.Starved.Threshold.Signal != tc.signal {
				t.Fatalf("starved = %+v, want %s", a.Starved, tc.signal)
			}
			if tc.wantNil {
				if a.NodeReclaim != nil {
					t.Fatalf("plan = %+v, want none", a.NodeReclaim)
				}
				return
			}
			if a.NodeReclaim == nil || !slices.Equal(a.NodeReclaim.Steps, tc.steps) || a.NodeReclaim.Need != tc.need {
				t.Fatalf("plan = %+v, want steps %v need %d", a.NodeReclaim, tc.steps, tc.need)
			}
		})
	}
}

// Section 3.2 step 18: after node-level reclaim, eviction is skipped only if
// no threshold at all (grace ignored, minimum reclaim enforced) is met.
func TestEngine_ReclaimSufficient(t *testing.T) {
	cfg := mustLoad(t, `
evictionHard: {nodefs.available: 10Gi, imagefs.available: 10Gi}
evictionSoft: {nodefs.inodesFree: "1000"}
evictionSoftGracePeriod: {nodefs.inodesFree: 1h}
evictionMinimumReclaim: {nodefs.available: 1Gi}`)
	e := NewEngine(cfg, newFakeClock(), "")
	base := func() Observations {
		return Observations{
			SignalNodeFsAvailable:  obsAt(20*Gi, 100*Gi, t0),
			SignalImageFsAvailable: obsAt(20*Gi, 100*Gi, t0),
			SignalNodeFsInodesFree: obsAt(1_000_000, 6_000_000, t0),
		}
	}
	cases := []struct {
		name   string
		change func(Observations)
		layout FilesystemLayout
		want   bool
	}{
		{"everything above threshold + minimum reclaim", func(Observations) {}, FilesystemLayout{}, true},
		{"above the threshold but not past minimum reclaim", func(o Observations) { o[SignalNodeFsAvailable] = obsAt(10*Gi+Gi/2, 100*Gi, t0) }, FilesystemLayout{}, false},
		{"another disk threshold still met", func(o Observations) { o[SignalImageFsAvailable] = obsAt(9*Gi, 100*Gi, t0) }, FilesystemLayout{DedicatedImageFs: true}, false},
		{"a soft threshold within its grace period counts", func(o Observations) { o[SignalNodeFsInodesFree] = obsAt(999, 6_000_000, t0) }, FilesystemLayout{}, false},
		{"derived containerfs threshold counts", func(o Observations) { o[SignalContainerFsAvailable] = obsAt(5*Gi, 100*Gi, t0) }, FilesystemLayout{}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			o := base()
			tc.change(o)
			if got := e.ReclaimSufficient(o, tc.layout); got != tc.want {
				t.Fatalf("ReclaimSufficient = %v, want %v", got, tc.want)
			}
		})
	}
}

// The loop may refill one Observations map on every pass; the engine must
// keep its own copy for the stale-stats guard, or every later sample looks
// as old as itself and no eviction ever happens again.
func TestEngine_KeepsItsOwnCopyOfObservations(t *testing.T) {
	clock := newFakeClock()
	e := NewEngine(mustLoad(t, "evictionHard: {memory.available: 500Mi}\nenforceNodeAllocatable: []"), clock, "")
	obs := Observations{SignalMemoryAvailable: obsAt(100*Mi, 8*Gi, clock.now)}
	for pass := 0; pass < 3; pass++ {
		a := e.Assess(Input{Observations: obs})
		if a.Starved == nil {
			t.Fatalf("pass %d on a new sample in a reused map: not starved", pass)
		}
		clock.Step(time.Second)
		obs[SignalMemoryAvailable] = obsAt(100*Mi, 8*Gi, clock.now)
	}
}

// Hot reload keeps the state of thresholds that still exist: a soft
// threshold's grace period keeps counting, hysteresis keeps holding with the
// new values; a removed threshold stops at once.
func TestEngine_SetConfigKeepsStateOfThresholdsThatRemain(t *testing.T) {
	clock := newFakeClock()
	soft := "evictionHard: {}\nevictionSoft: {memory.available: 1Gi}\nevictionSoftGracePeriod: {memory.available: 1m}\n"
	e := NewEngine(mustLoad(t, soft), clock, "")
	in := func(avail int64) Input {
		return Input{Observations: Observations{SignalMemoryAvailable: obsAt(avail, 8*Gi, clock.now)}}
	}
	e.Assess(in(900 * Mi))
	clock.Step(40 * time.Second)
	e.SetConfig(mustLoad(t, soft+"evictionMinimumReclaim: {memory.available: 500Mi}"))
	clock.Step(20 * time.Second)
	if a := e.Assess(in(900 * Mi)); a.Starved == nil {
		t.Fatalf("grace period restarted on reload: not starved 60 s after first observation")
	}
	clock.Step(time.Second)
	if a := e.Assess(in(1200 * Mi)); a.Starved == nil {
		t.Fatalf("the reloaded minimum reclaim (1Gi + 500Mi) does not hold the threshold at 1200Mi")
	}
	e.SetConfig(mustLoad(t, "evictionHard: {}"))
	clock.Step(time.Second)
	if a := e.Assess(in(100 * Mi)); len(a.Met) != 0 {
		t.Fatalf("a removed threshold is still met: %d", len(a.Met))
	}
}

// What a reclaim step frees for one disk signal it frees for every signal on
// the same filesystem, by layout (simulate's node credits them all).
func TestSameFilesystem_PerLayout(t *testing.T) {
	single := FilesystemLayout{}
	dedicated := FilesystemLayout{DedicatedImageFs: true}
	split := FilesystemLayout{DedicatedImageFs: true, SplitContainerFs: true}
	bytes := []Signal{SignalNodeFsAvailable, SignalImageFsAvailable, SignalContainerFsAvailable}
	cases := []struct {
		signal Signal
		layout FilesystemLayout
		want   []Signal
	}{
		{SignalNodeFsAvailable, single, bytes},
		{SignalImageFsAvailable, single, bytes},
		{SignalNodeFsInodesFree, single, []Signal{SignalNodeFsInodesFree, SignalImageFsInodesFree, SignalContainerFsInodesFree}},
		{SignalNodeFsAvailable, dedicated, []Signal{SignalNodeFsAvailable}},
		{SignalImageFsAvailable, dedicated, []Signal{SignalImageFsAvailable, SignalContainerFsAvailable}},
		{SignalContainerFsInodesFree, dedicated, []Signal{SignalImageFsInodesFree, SignalContainerFsInodesFree}},
		{SignalImageFsAvailable, split, []Signal{SignalImageFsAvailable}},
		{SignalContainerFsAvailable, split, []Signal{SignalNodeFsAvailable, SignalContainerFsAvailable}},
		{SignalNodeFsInodesFree, split, []Signal{SignalNodeFsInodesFree, SignalContainerFsInodesFree}},
		{SignalMemoryAvailable, single, nil},
	}
	for _, tc := range cases {
		if got := SameFilesystem(tc.signal, tc.layout); !slices.Equal(got, tc.want) {
			t.Errorf("SameFilesystem(%s, %+v) = %v, want %v", tc.signal, tc.layout, got, tc.want)
		}
	}
}
