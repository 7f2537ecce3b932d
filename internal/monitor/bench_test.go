package monitor

import (
	"context"
	"testing"

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
