package monitor

import (
	"context"
	"testing"

	"github.com/evictiond/evictiond/internal/nodefs"
	"github.com/evictiond/evictiond/internal/policy"
)

// BenchmarkObserveMemoryFixture reads the memory signals from the cgroup v2
// fixture tree (no root needed); the real-host figure is
// BenchmarkObserveMemoryRealHost (integration).
func BenchmarkObserveMemoryFixture(b *testing.B) {
	m, err := New(Config{HostRoot: "testdata/v2-systemd", CgroupDriver: CgroupDriverSystemd, DisableCAdvisor: true})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, ok := m.ObserveMemory().Observations[policy.SignalMemoryAvailable]; !ok {
			b.Fatal("memory.available missing")
		}
	}
}

// BenchmarkObserveFixturePods is a full pass over the fixture's three pods.
func BenchmarkObserveFixturePods(b *testing.B) {
	m, err := New(Config{HostRoot: "testdata/v2-systemd", CgroupDriver: CgroupDriverSystemd, DisableCAdvisor: true})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		m.Observe(context.Background(), fixturePods)
	}
}

// BenchmarkObserveFastFixture reads what the fast poll and the brake's second
// reading take (memory signals and pid.available) from the fixture tree.
func BenchmarkObserveFastFixture(b *testing.B) {
	m, err := New(Config{HostRoot: "testdata/v2-systemd", CgroupDriver: CgroupDriverSystemd, DisableCAdvisor: true})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, ok := m.ObserveFast().Observations[policy.SignalPIDAvailable]; !ok {
			b.Fatal("pid.available missing")
		}
	}
}

// BenchmarkPodMemoryStat is the cost reclaim before evict adds to every pod
// read (ranking, and passes near a memory threshold with memoryReclaim on):
// the pod's page cache (file) taken from the memory.stat the working set
// already reads, against the working set's key alone.
func BenchmarkPodMemoryStat(b *testing.B) {
	path := "testdata/v2-systemd/sys/fs/cgroup/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod0e7f5a36_9c1e_4f53_9d0a_7f8ac2a1b111.slice/memory.stat"
	var inactive, file int64
	b.Run("workingSetOnly", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := nodefs.ReadStatKeys(path, map[string]*int64{"inactive_file": &inactive}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("withPageCache", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := nodefs.ReadStatKeysOptional(path, map[string]*int64{"inactive_file": &inactive}, map[string]*int64{"file": &file}); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkMemoryReclaimExtraReads is what a pass near a memory threshold
// with memoryReclaim on reads beyond a quiet pass: every pod's memory (to
// choose whom to ask) and, once pods were asked, the node again.
func BenchmarkMemoryReclaimExtraReads(b *testing.B) {
	m, err := New(Config{HostRoot: "testdata/v2-systemd", CgroupDriver: CgroupDriverSystemd, DisableCAdvisor: true})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	s := m.ObserveNode(ctx)
	b.Run("podUsage", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			m.ObservePods(ctx, s, fixturePods)
		}
	})
	b.Run("nodeAgain", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			m.ObserveNode(ctx)
		}
	})
}

// BenchmarkObservePodPressure is what podPressure adds to every pass on
// cgroup v2: each pod's memory.pressure, memory.current and memory.max (the
// fixture's three pods), against the same pass without it in
// BenchmarkObserveFixturePods's figure.
func BenchmarkObservePodPressure(b *testing.B) {
	m, err := New(Config{HostRoot: "testdata/v2-systemd", CgroupDriver: CgroupDriverSystemd, DisableCAdvisor: true})
	if err != nil {
		b.Fatal(err)
	}
	cgs := make([]string, 0, len(fixturePods))
	for _, p := range fixturePods {
		cg, err := m.locatePod(p)
		if err != nil {
			b.Fatal(err)
		}
		cgs = append(cgs, cg)
	}
	b.ReportAllocs()
	for b.Loop() {
		for _, cg := range cgs {
			m.readPodPressure(cg)
		}
	}
}
