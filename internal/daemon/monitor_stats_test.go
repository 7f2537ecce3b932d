package daemon

import (
	"context"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/evictiond/evictiond/internal/monitor"
	"github.com/evictiond/evictiond/internal/policy"
)

const fixtureHost = "../monitor/testdata/v2-systemd"

func TestMonitorStatsGivesTheAgentSignalsAndPodUsage(t *testing.T) {
	m, err := monitor.New(monitor.Config{HostRoot: fixtureHost, CgroupDriver: monitor.CgroupDriverSystemd, DisableCAdvisor: true})
	if err != nil {
		t.Fatal(err)
	}
	pod := &v1.Pod{}
	pod.UID = "0e7f5a36-9c1e-4f53-9d0a-7f8ac2a1b111"
	pod.Namespace, pod.Name = "shop", "web-7d9f"
	pod.Status.QOSClass = v1.PodQOSBurstable
	stats := MonitorStats{m}
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
