package policy

import (
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
)

func TestPodPressureIsOnByDefaultAndRejectsBadPercentages(t *testing.T) {
	cfg := mustLoad(t, "")
	if want := (PodPressureConfig{Enabled: true, Stall: 2000, Margin: 500}); cfg.PodPressure != want {
		t.Errorf("defaults %+v, want %+v (it only observes: on by default)", cfg.PodPressure, want)
	}
	errs := strings.Join(loadErrors(t, "podPressure: {stall: 120%, margin: five}\n"), "\n")
	for _, want := range []string{`podPressure.stall: "120%"`, `podPressure.margin: "five"`} {
		if !strings.Contains(errs, want) {
			t.Errorf("errors lack %q:\n%s", want, errs)
		}
	}
}

func TestAssessPodPressureExplainsOnlyTheStallThePodAccountsFor(t *testing.T) {
	cfg := mustLoad(t, "evictionHard: {memory.available: 100Mi}\nevictionSoft: {allocatableMemory.pressure.some.avg10: 30%}\nevictionSoftGracePeriod: {allocatableMemory.pressure.some.avg10: 10s}\npodPressure: {stall: 50%}\n")
	thrasher, web := newPod("thrasher"), newPod("web")
	pods := []*v1.Pod{thrasher, web}
	at := func(some int64, usage, limit int64) PodMemoryPressure {
		return PodMemoryPressure{Some: [3]int64{some, some / 2, some / 4}, Full: [3]int64{some / 2, 0, 0}, Usage: usage, Limit: limit}
	}
	psi := func(pct float64) Observation { return obsAt(PSIScale-int64(pct*100), PSIScale, t0) }
	cases := []struct {
		name          string
		pod           PodMemoryPressure
		kubepods      float64
		memAvailable  int64
		wantPods      int
		wantExplained bool
	}{
		{"at its limit, kubepods' met stall its own: explained and reported below podPressure.stall", at(4500, 60*Mi, 64*Mi), 47, 6 * Gi, 1, true},
		{"kubepods' stall well above the pod's: node pressure", at(4500, 60*Mi, 64*Mi), 80, 6 * Gi, 0, false},
		{"above podPressure.stall, no threshold met: reported", at(6000, 60*Mi, 64*Mi), 10, 6 * Gi, 1, false},
		{"stalled below its limit: not self-inflicted", at(6000, 20*Mi, 64*Mi), 47, 6 * Gi, 0, false},
		{"stalled without a limit", at(6000, 2*Gi, 0), 47, 6 * Gi, 0, false},
		{"below podPressure.stall, no threshold met: quiet", at(1000, 63*Mi, 64*Mi), 12, 6 * Gi, 0, false},
		{"the node short of memory: never explained away", at(6000, 60*Mi, 64*Mi), 47, 50 * Mi, 0, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			obs := Observations{SignalMemoryAvailable: obsAt(c.memAvailable, 16*Gi, t0),
				SignalAllocatableMemoryPSISomeAvg10: psi(c.kubepods), SignalAllocatableMemoryPSIFullAvg10: psi(10)}
			pp := c.pod
			stats := PodStatsByUID{"thrasher": {MemoryPressure: &pp}, "web": {}}
			pa := AssessPodPressure(cfg, obs, FilesystemLayout{}, pods, stats)
			got := 0
			if pa != nil {
				got = len(pa.Pods)
			}
			if got != c.wantPods {
				t.Fatalf("%d pods reported, want %d (%+v)", got, c.wantPods, pa)
			}
			explained := false
			if pa != nil {
				_, explained = pa.Explained[SignalAllocatableMemoryPSISomeAvg10]
				if _, full := pa.Explained[SignalAllocatableMemoryPSIFullAvg10]; full {
					t.Errorf("kubepods' full avg10 explained: it has no threshold")
				}
			}
			if explained != c.wantExplained {
				t.Errorf("some avg10 explained %v, want %v (%+v)", explained, c.wantExplained, pa)
			}
		})
	}
	cfg.PodPressure.Enabled = false
	pp := at(6000, 60*Mi, 64*Mi)
	if pa := AssessPodPressure(cfg, Observations{SignalAllocatableMemoryPSISomeAvg10: psi(47)}, FilesystemLayout{}, pods, PodStatsByUID{"thrasher": {MemoryPressure: &pp}}); pa != nil {
		t.Errorf("podPressure off, yet %+v", pa)
	}
}

// An explained PSI signal's threshold is not met: no condition, nothing starved.
func TestAssessDoesNotCountExplainedPressure(t *testing.T) {
	cfg := mustLoad(t, "evictionHard: {memory.available: 100Mi, allocatableMemory.pressure.some.avg10: 30%}\n")
	clk := newFakeClock()
	e := NewEngine(cfg, clk, "")
	obs := Observations{SignalMemoryAvailable: obsAt(6*Gi, 16*Gi, t0), SignalAllocatableMemoryPSISomeAvg10: obsAt(PSIScale-4700, PSIScale, t0)}
	a := e.Assess(Input{Observations: obs, Explained: map[Signal]string{SignalAllocatableMemoryPSISomeAvg10: "the thrasher's own"}})
	if len(a.Met) != 0 || len(a.Conditions) != 0 || a.Starved != nil {
		t.Errorf("explained stall counted: met %d, conditions %v, starved %v", len(a.Met), a.Conditions, a.Starved)
	}
	clk.Step(time.Second)
	obs[SignalAllocatableMemoryPSISomeAvg10] = obsAt(PSIScale-4700, PSIScale, clk.now)
	a = e.Assess(Input{Observations: obs})
	if a.Starved == nil {
		t.Error("the same stall unexplained is not acted on")
	}
}
