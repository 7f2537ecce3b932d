package simulate

import (
	"os"
	"strings"
	"testing"
)

// The example with memoryReclaim off evicts the cache reader, as the kubelet
// would; in dry run it asks the kernel for nothing and evicts as if off.
func TestMemoryReclaimExampleOffAndDryRun(t *testing.T) {
	data, err := os.ReadFile("../../examples/memory-reclaim.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ name, from, to string }{
		{"off", "memoryReclaim: {enabled: true,", "memoryReclaim: {enabled: false,"},
		{"dry run", "evictionPressureTransitionPeriod: 1m", "evictionPressureTransitionPeriod: 1m\n  dryRun: true"},
	} {
		t.Run(c.name, func(t *testing.T) {
			sc, cfg, err := Decode([]byte(strings.Replace(string(data), c.from, c.to, 1)))
			if err != nil {
				t.Fatal(err)
			}
			res, err := Run(sc, cfg)
			if err != nil {
				t.Fatal(err)
			}
			var first string
			for _, s := range res.Steps {
				if m := s.MemoryReclaim; m != nil {
					if c.name == "off" {
						t.Fatalf("t=%s: memory reclaim ran while off: %+v", s.At, m)
					}
					for _, p := range m.Pods {
						if p.Freed != "0" {
							t.Errorf("t=%s: dry run freed %s from %s", s.At, p.Freed, p.Pod)
						}
					}
					if m.EvictionAvoided {
						t.Errorf("t=%s: dry run avoided an eviction", s.At)
					}
				}
				if s.Eviction != nil && first == "" {
					first = s.At + " " + s.Eviction.Pod
				}
			}
			// t=20s is the first hard crossing: the indexer (its page cache in
			// its working set, the most above its request then) goes.
			if first != "20s search/indexer" {
				t.Errorf("first eviction %q, want 20s search/indexer (the kubelet's choice without reclaim)", first)
			}
		})
	}
}

// Without podPressure the self-inflicted stall is taken for node pressure:
// MemoryPressure from t=10s and the web pod, a bystander, evicted at t=25s.
func TestPodPressureOffEvictsTheBystander(t *testing.T) {
	data, err := os.ReadFile("../../examples/psi-self-inflicted.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		config    string
		wantFirst string
	}{
		{"", "45s shop/web"},
		{"  podPressure: {enabled: false}\n", "25s shop/web"},
	} {
		sc, cfg, err := Decode([]byte(strings.Replace(string(data), "node: {name: node-1}\n", c.config+"node: {name: node-1}\n", 1)))
		if err != nil {
			t.Fatal(err)
		}
		res, err := Run(sc, cfg)
		if err != nil {
			t.Fatal(err)
		}
		first := ""
		for _, s := range res.Steps {
			if s.Eviction != nil && first == "" {
				first = s.At + " " + s.Eviction.Pod
			}
			if c.config != "" && len(s.SelfInflicted) > 0 {
				t.Errorf("t=%s: self-inflicted pods reported with podPressure off", s.At)
			}
		}
		if first != c.wantFirst {
			t.Errorf("config %q: first eviction %q, want %q", c.config, first, c.wantFirst)
		}
	}
}
