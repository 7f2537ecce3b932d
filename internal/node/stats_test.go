package node

import (
	"context"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/evictiond/evictiond/internal/monitor"
	"github.com/evictiond/evictiond/internal/policy"
)

const fixtureHost = "../monitor/testdata/v2-systemd"

func TestStatsGivesTheAgentSignalsAndPodUsage(t *testing.T) {
	m, err := monitor.New(monitor.Config{HostRoot: fixtureHost, CgroupDriver: monitor.CgroupDriverSystemd, DisableCAdvisor: true})
	if err != nil {
		t.Fatal(err)
	}
	pod := &v1.Pod{}
	pod.UID = "0e7f5a36-9c1e-4f53-9d0a-7f8ac2a1b111"
	pod.Namespace, pod.Name = "shop", "web-7d9f"
	pod.Status.QOSClass = v1.PodQOSBurstable
	stats := Stats{M: m}
	obs := stats.Observe(context.Background(), []*v1.Pod{pod})
	if _, ok := obs.Observations[policy.SignalMemoryAvailable]; !ok {
		t.Errorf("no memory.available: %v", obs.Missing)
	}
	ps := obs.Pods[pod.UID]
	if ps.MemoryWorkingSet != nil || ps.Processes != nil {
		t.Errorf("every-pass Observe read pod cgroups (memory %v, processes %v); only ranking should", ps.MemoryWorkingSet, ps.Processes)
	}
	if v, ok := ps.Volumes["cache"]; !ok || v.UsedBytes == nil {
		t.Errorf("emptyDir volume not measured for local-storage limits: %+v", ps.Volumes)
	}
	stats.ObserveUsage(context.Background(), []*v1.Pod{pod}, &obs)
	ps = obs.Pods[pod.UID]
	if ps.MemoryWorkingSet == nil || *ps.MemoryWorkingSet != 240<<20 || ps.Processes == nil || *ps.Processes != 4 {
		t.Errorf("pod stats %+v", ps)
	}
	if v, ok := ps.Volumes["cache"]; !ok || v.UsedBytes == nil {
		t.Errorf("emptyDir volume not measured: %+v", ps.Volumes)
	}
}

// The fast poll reads through ObserveFast; the loop takes those readings for
// the brake's rate, oldest first, each once, and only the newest few are kept
// however long the loop did not take them.
func TestStatsKeepsTheNewestFastReadingsForTheLoop(t *testing.T) {
	m, err := monitor.New(monitor.Config{HostRoot: fixtureHost, CgroupDriver: monitor.CgroupDriverSystemd, DisableCAdvisor: true})
	if err != nil {
		t.Fatal(err)
	}
	stats := Stats{M: m, Recent: NewRecentReadings(3)}
	if got := stats.FastReadings(); len(got) != 0 {
		t.Fatalf("readings before any read: %v", got)
	}
	var read []policy.Observations
	for range 5 {
		obs := stats.ObserveFast()
		if _, ok := obs[policy.SignalAllocatableMemoryAvailable]; !ok {
			t.Fatalf("fast reading without allocatableMemory.available: %v", obs)
		}
		read = append(read, obs)
	}
	got := stats.FastReadings()
	if len(got) != 3 {
		t.Fatalf("kept %d readings, want the newest 3", len(got))
	}
	for i, obs := range got {
		want := read[2+i][policy.SignalAllocatableMemoryAvailable].Time
		if at := obs[policy.SignalAllocatableMemoryAvailable].Time; !at.Equal(want) {
			t.Errorf("reading %d taken at %v, want the newest three in order (%v)", i, at, want)
		}
	}
	if again := stats.FastReadings(); len(again) != 0 {
		t.Errorf("the same readings handed out twice: %d", len(again))
	}
	// Without Recent (a Stats built without it) nothing is kept.
	if got := (Stats{M: m}).FastReadings(); got != nil {
		t.Errorf("readings without Recent: %v", got)
	}
}
