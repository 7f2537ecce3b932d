package main

import (
	"context"

	v1 "k8s.io/api/core/v1"

	"github.com/evictiond/evictiond/internal/agent"
	"github.com/evictiond/evictiond/internal/monitor"
)

// monitorStats is the agent's Stats, read by the monitor: node signals and
// the usage of the pods the agent is deciding about.
type monitorStats struct{ m *monitor.Monitor }

var _ agent.Stats = monitorStats{}

// Observe reads the node signals and the pods' cached disk usage.
func (s monitorStats) Observe(ctx context.Context, pods []*v1.Pod) agent.Observed {
	refs := monitor.PodRefsFromPods(pods)
	s.m.SetPods(refs) // the disk refresher measures these pods
	snap := s.m.ObserveNode(ctx)
	s.m.ObservePodDisk(ctx, snap, refs)
	return agent.Observed{
		Observations: snap.Observations,
		Pods:         snap.Pods,
		Layout:       snap.Layout,
		Missing:      snap.Missing,
		Handle:       snap,
	}
}

// ObserveUsage adds fresh memory and process counts, for ranking.
func (s monitorStats) ObserveUsage(ctx context.Context, pods []*v1.Pod, obs *agent.Observed) {
	snap, ok := obs.Handle.(*monitor.Snapshot)
	if !ok {
		return
	}
	s.m.ObservePods(ctx, snap, monitor.PodRefsFromPods(pods))
	obs.Pods = snap.Pods
}
