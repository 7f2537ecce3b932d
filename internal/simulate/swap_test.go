package simulate

import (
	"os"
	"strings"
	"testing"
)

// The swap example: with swap.available's threshold evictiond evicts etl (the most
// memory+swap above its request) at the crossing; without it — the kubelet's
// configuration, which has no swap signal — the same node evicts nothing and shows no
// MemoryPressure, memory.available being far from its threshold.
func TestSwapExampleEvictsOnlyWithTheSwapThreshold(t *testing.T) {
	data, err := os.ReadFile("../../examples/swap-pressure.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, from, to string
		want           string
	}{
		{"swap.available set", "", "", "20s batch/etl swap.available"},
		{"kubelet's thresholds only", "evictionHard: {memory.available: 500Mi, swap.available: 25%}", "evictionHard: {memory.available: 500Mi}", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			res := runScenario(t, strings.Replace(string(data), c.from, c.to, 1))
			var got []string
			for _, s := range res.Steps {
				if s.Eviction != nil {
					got = append(got, s.At+" "+s.Eviction.Pod+" "+deref(s.StarvedSignal))
				}
				if c.want == "" && len(s.NodeConditions) > 0 {
					t.Errorf("t=%s: conditions %v without a swap threshold", s.At, s.NodeConditions)
				}
			}
			if strings.Join(got, "; ") != c.want {
				t.Errorf("evictions %q, want %q", got, c.want)
			}
		})
	}
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
