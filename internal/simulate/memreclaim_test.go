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
