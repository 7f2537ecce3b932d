package simulate

import (
	"os"
	"slices"
	"testing"
)

// TestEvictionLoopExample_HoldsTheNodeOnTheBackoffSchedule plays
// examples/eviction-loop.yaml and checks the decisions the golden file
// records: the second eviction of the Deployment starts a loop, the node
// stays under pressure past the transition period until the backoff ends,
// the third doubles it, and the Guaranteed pod is never the victim.
func TestEvictionLoopExample_HoldsTheNodeOnTheBackoffSchedule(t *testing.T) {
	data, err := os.ReadFile("../../examples/eviction-loop.yaml")
	if err != nil {
		t.Fatal(err)
	}
	sc, cfg, err := Decode(data)
	if err != nil {
		t.Fatal(err)
	}
	res, err := Run(sc, cfg)
	if err != nil {
		t.Fatal(err)
	}
	step := map[string]StepResult{}
	for _, s := range res.Steps {
		step[s.At] = s
		if s.Eviction != nil && s.Eviction.Pod == "shop/db-0" {
			t.Errorf("t=%s: the Guaranteed bystander was evicted", s.At)
		}
	}
	if l := step["30s"].Loops; len(l) != 0 {
		t.Errorf("first eviction reported a loop: %+v", l)
	}
	if l := step["1m31s"].Loops; len(l) != 1 || !l[0].Started || l[0].Workload != "Deployment shop/web" || l[0].Kind != "Deployment" || l[0].Backoff != "2m0s" {
		t.Errorf("second eviction: loops %+v, want Deployment shop/web started with a 2m0s backoff", l)
	}
	if l := step["4m2s"].Loops; len(l) != 1 || l[0].Started || l[0].Evictions != 3 || l[0].Backoff != "4m0s" {
		t.Errorf("third eviction: loops %+v, want 3 evictions, backoff doubled to 4m0s", l)
	}
	held := func(at string) bool { return slices.Contains(step[at].NodeConditions, "MemoryPressure") }
	for at, want := range map[string]bool{"1m1s": false, "2m10s": true, "3m32s": false, "8m": true, "8m3s": false} {
		if held(at) != want {
			t.Errorf("t=%s: MemoryPressure %v, want %v", at, held(at), want)
		}
	}
}
