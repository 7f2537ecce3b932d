package monitor

import (
	"context"
	"testing"

	"k8s.io/apimachinery/pkg/types"

	"github.com/evictiond/evictiond/internal/policy"
)

// swap.available is SwapFree of SwapTotal; each pod's swap is its cgroup's
// memory.swap.current on v2, unmeasured (nil) on v1.
func TestFixtureSwapSignalAndPodSwap(t *testing.T) {
	for _, tc := range []struct {
		tree   string
		driver CgroupDriver
	}{{"v2-systemd", CgroupDriverSystemd}, {"v2-cgroupfs", CgroupDriverCgroupfs}} {
		t.Run(tc.tree, func(t *testing.T) {
			m := fixtureMonitor(t, tc.tree, tc.driver, nil)
			s := m.Observe(context.Background(), fixturePods)
			wantObservation(t, s, policy.SignalSwapAvailable, 1536<<20, 2<<30)
			if r := readingOf(s, policy.SignalSwapAvailable); r.Source != SourceMemInfoSwap {
				t.Errorf("source %q, want %q", r.Source, SourceMemInfoSwap)
			}
			for uid, want := range map[string]int64{string(podBurstable): 64 << 20, string(podGuaranteed): 0, string(podBestEffort): 0} {
				ps := s.Pods[types.UID(uid)]
				if ps.MemorySwap == nil || *ps.MemorySwap != want {
					t.Errorf("pod %s swap %v, want %d", uid, deref(ps.MemorySwap), want)
				}
			}
		})
	}
}

// A node without swap has no swap.available (never "0 left"), and that is no read error.
func TestFixtureNoSwapIsAbsentNotZero(t *testing.T) {
	m := fixtureMonitor(t, "v1-cgroupfs", CgroupDriverCgroupfs, nil)
	s := m.Observe(context.Background(), fixturePods)
	if o, ok := s.Observations[policy.SignalSwapAvailable]; ok {
		t.Fatalf("swap.available observed on a node with SwapTotal 0: %+v", o)
	}
	if s.Missing[policy.SignalSwapAvailable] != "the node has no swap (SwapTotal 0)" {
		t.Errorf("reason %q", s.Missing[policy.SignalSwapAvailable])
	}
	if n := counterValue(t, m.metrics.signalReadErrors, string(policy.SignalSwapAvailable)); n != 0 {
		t.Errorf("read error counted %v times for a node without swap", n)
	}
	if ps := s.Pods[podBurstable]; ps.MemorySwap != nil {
		t.Errorf("pod swap %d read on cgroup v1, want unmeasured", *ps.MemorySwap)
	}
}
